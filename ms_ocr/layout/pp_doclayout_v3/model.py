"""PP-DocLayoutV3 (transformers' PPDocLayoutV3ForObjectDetection at inference): the shared RT-DETR detector with a
mask branch. The encoder also makes mask prototypes from the fused maps and the stride-4 backbone map; the queries'
initial boxes are the boxes of their masks (mask_enhanced); the decoder's class and box heads are the encoder's
(tied); the last layer's normed queries give the class logits, a mask per query and the reading-order logits
(GlobalPointer over all queries).

Only the last decoder layer's class logits, masks and order logits are computed: the reference computes them for
every layer and returns the last."""

from mindspore import nn, ops

from ms_ocr.layout.decoder import Decoder, MLPHead, inverse_sigmoid, refine
from ms_ocr.layout.detector import DetrModel, LayoutModel
from ms_ocr.layout.heads import GlobalPointer
from ms_ocr.layout.pp_doclayout_v3.mask_head import MaskHybridEncoder, mask_to_box
from ms_ocr.nn.layers import LayerNorm, Linear


class PPDocLayoutV3Model(DetrModel):
    def __init__(self, cfg):
        d = cfg.d_model
        decoder = Decoder(cfg)
        if not cfg.tie_word_embeddings:  # heads of its own, named before the decoder joins the model
            decoder.class_embed = Linear(d, cfg.num_labels)
            decoder.bbox_embed = MLPHead(d, d, 4, 3)
        super().__init__(cfg, encoder=MaskHybridEncoder(cfg), decoder=decoder)
        self.decoder_order_head = nn.CellList([Linear(d, d) for _ in range(cfg.decoder_layers)])
        self.decoder_global_pointer = GlobalPointer(d, cfg.global_pointer_head_size)
        self.decoder_norm = LayerNorm(d, cfg.layer_norm_eps)
        self.mask_query_head = MLPHead(d, d, cfg.num_prototypes, 3)
        self.tied = cfg.tie_word_embeddings
        self.mask_enhanced = cfg.mask_enhanced
        self.front_extras = 1

    def masks(self, query, prototypes):
        """Normed queries [B, Q, C] x prototypes [B, P, H, W] -> mask logits [B, Q, H, W]."""
        b, p, h, w = prototypes.shape
        return ops.matmul(self.mask_query_head(query), prototypes.reshape(b, p, h * w)).reshape(b, -1, h, w)

    def fuse(self, proj, pos, unprojected):
        maps, prototypes = self.encoder(proj, pos, unprojected[0])
        return maps, (prototypes,)

    def initial_reference(self, ref_logits, target, extras):
        """mask_enhanced: the boxes of the queries' masks (through the logit round trip, as the reference)."""
        if self.mask_enhanced:
            boxes = mask_to_box(self.masks(self.decoder_norm(target), extras[0]) > 0)
            return ops.sigmoid(inverse_sigmoid(boxes))
        return ops.sigmoid(ref_logits)

    def box_head(self, i):
        return self.enc_bbox_head if self.tied else self.decoder.bbox_embed

    def back(self, x, boxes, prototypes, coords=None):
        query = self.decoder_norm(x)
        logits = self.enc_score_head(query) if self.tied else self.decoder.class_embed(query)
        order = self.decoder_global_pointer(self.decoder_order_head[len(self.decoder.layers) - 1](query))
        return logits, boxes, order, self.masks(query, prototypes)

    def construct(self, pixel_values, pos, anchor_logits, valid, shapes):
        target, ref, memory, extras = self.front(pixel_values, pos, anchor_logits, valid)
        if self.tied:
            x, boxes = refine(self.decoder, self.enc_bbox_head, False, target, memory, ref, shapes)
        else:
            x, boxes = refine(self.decoder, self.decoder.bbox_embed, False, target, memory, ref, shapes)
        return self.back(x, boxes, extras[0])


class PPDocLayoutV3(LayoutModel):
    """pixel_values and the host tables -> (logits [B, Q, C], pred_boxes [B, Q, 4] (cx, cy, w, h in [0, 1]),
    order_logits [B, Q, Q], out_masks [B, Q, H/4, W/4]), in query order."""

    def __init__(self, cfg):
        super().__init__(PPDocLayoutV3Model(cfg))

    def construct(self, pixel_values, pos, anchor_logits, valid, shapes):
        return self.model(pixel_values, pos, anchor_logits, valid, shapes)
