"""PP-DocLayoutV4 (transformers' PPDocLayoutV4ForObjectDetection at inference): the shared RT-DETR detector over
quadrilaterals. Anchors, encoder proposals and every decoder layer's references are 10 numbers (centre, then the
four corners as offsets + 0.5); the deformable attention samples around each quad's enclosing rectangle while the
query position head reads the whole quad; a box head per layer refines the quads. After the last layer (no norm):
the class logits, successor logits and relative order logits (with the S2R closure of the successor graph), and,
when the checkpoint has one, the page geometry from one encoder map."""

from mindspore import nn

from ms_ocr.layout.decoder import Decoder, MLPHead, refine
from ms_ocr.layout.detector import DetrModel, LayoutModel
from ms_ocr.layout.pp_doclayout_v4.heads import DeformHead, RelativeOrderHead, SuccessorOrderHead
from ms_ocr.nn.layers import Linear

COORDS = 10


class PPDocLayoutV4Model(DetrModel):
    def __init__(self, cfg):
        d, layers = cfg.d_model, cfg.decoder_layers
        decoder = Decoder(cfg, COORDS)  # its heads set before it joins the model, so their names carry its path
        decoder.bbox_embed = nn.CellList([MLPHead(d, d, COORDS, 3) for _ in range(layers)])
        # one class head per layer as in the checkpoint; inference reads the last
        decoder.class_embed = nn.CellList([Linear(d, cfg.num_labels) for _ in range(layers)])
        decoder.successor_order_head = SuccessorOrderHead(cfg)
        decoder.relative_order_head = RelativeOrderHead(cfg)
        super().__init__(cfg, decoder=decoder, coords=COORDS)
        self.deform_level = cfg.deform_level
        self.has_geometry = cfg.deform_pred
        self.front_extras = 1
        if cfg.deform_pred:
            self.deform_head = DeformHead(cfg)

    def host_inputs(self, height, width):
        pos, anchors, valid, shapes = super().host_inputs(height, width)
        coords = DeformHead.coordinates(*shapes[self.deform_level]) if self.has_geometry else None
        return pos, anchors, valid, shapes, coords

    def fuse(self, proj, pos, unprojected):
        maps = self.encoder(proj, pos)
        return maps, (maps[self.deform_level],)

    def back(self, x, quads, geometry_map, coords):
        dec = self.decoder
        logits = dec.class_embed[len(dec.layers) - 1](x)
        successor = dec.successor_order_head(x)
        relative = dec.relative_order_head(x, successor)
        if self.has_geometry:
            return logits, quads, relative, successor, self.deform_head(geometry_map, coords)
        return logits, quads, relative, successor

    def construct(self, pixel_values, pos, anchor_logits, valid, shapes, coords):
        target, ref, memory, extras = self.front(pixel_values, pos, anchor_logits, valid)
        x, quads = refine(self.decoder, self.decoder.bbox_embed, True, target, memory, ref, shapes, quads=True)
        return self.back(x, quads, extras[0], coords)


class PPDocLayoutV4(LayoutModel):
    """pixel_values and the host tables -> (logits [B, Q, C], pred_boxes [B, Q, 10] (quads), relative_order_logits
    [B, Q, Q], successor_order_logits [B, Q, Q][, warp_params [B, 5] with a geometry head]), in query order."""

    def __init__(self, cfg):
        super().__init__(PPDocLayoutV4Model(cfg))

    def construct(self, pixel_values, pos, anchor_logits, valid, shapes, coords):
        return self.model(pixel_values, pos, anchor_logits, valid, shapes, coords)
