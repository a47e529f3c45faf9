"""The RT-DETR detector the PP-DocLayout models share (transformers' PPDocLayoutV2Model / V3 / V4 at inference):
HGNetV2 -> input projections -> hybrid encoder -> decoder input projections -> anchor-based query selection (the top
num_queries encoder scores) -> decoder layers (self-attention with the query position head, multi-scale deformable
attention, MLP; boxes refined layer by layer). Each model's package adds its heads; PP-DocLayoutV2's class and box
heads are `Detector` below."""

import numpy as np
from mindspore import Tensor, nn, ops

from ms_ocr import ops as K
from ms_ocr.layout.backbone import FrozenBatchNorm, HGNetV2Backbone, _Weight
from ms_ocr.layout.decoder import Decoder, MLPHead, refine
from ms_ocr.layout.encoder import HybridEncoder
from ms_ocr.nn.layers import LayerNorm, Linear

ANCHOR_GRID = 0.05
FP32_MAX = float(np.finfo(np.float32).max)


def anchors(shapes, grid=ANCHOR_GRID, quads=False):
    """The reference's anchors for feature maps `shapes` [(H, W)]: logit-space rows [1, S, 4] (cx, cy, w, h), or
    with `quads` [1, S, 10] (cx, cy, then the corners TL, TR, BR, BL of a square of side grid * 2^level around 0.5,
    PP-DocLayoutV4), and the valid mask [1, S, 1] (every coordinate strictly inside (0.01, 0.99)); invalid anchors
    hold float32 max. Computed in float32 step by step as the reference does."""
    out = []
    for level, (h, w) in enumerate(shapes):
        gy, gx = np.meshgrid(np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32), indexing="ij")
        cx = (gx + np.float32(0.5)) / np.float32(w)
        cy = (gy + np.float32(0.5)) / np.float32(h)
        if quads:
            half = grid * (2.0 ** level) / 2.0  # Python floats, rounded once to float32 as the reference's tensor
            corners = np.array([0.5 - half, 0.5 - half, 0.5 + half, 0.5 - half, 0.5 + half, 0.5 + half, 0.5 - half,
                                0.5 + half], np.float32)
            centres = np.stack([cx, cy], -1).reshape(-1, 2)
            out.append(np.concatenate([centres, np.broadcast_to(corners, (h * w, 8))], 1))
        else:
            wh = np.full_like(cx, np.float32(grid) * np.float32(2.0 ** level))
            out.append(np.stack([cx, cy, wh, wh], -1).reshape(-1, 4))
    a = np.concatenate(out, 0)[None].astype(np.float32)
    valid = ((a > np.float32(1e-2)) & (a < np.float32(1 - 1e-2))).all(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        logit = np.log(a / (np.float32(1) - a)).astype(np.float32)
    return np.where(valid, logit, np.float32(FP32_MAX)).astype(np.float32), valid


def take_rows(x, idx):
    """x [B, S, ...] rows picked by idx [B, Q] -> [B, Q, ...]."""
    b, s = x.shape[0], x.shape[1]
    flat = (idx + (ops.arange(b, dtype=idx.dtype) * s)[:, None]).reshape(-1)
    return ops.gather(x.reshape((b * s,) + x.shape[2:]), flat, 0).reshape(idx.shape + x.shape[2:])


def _proj(cin, cout, eps):
    """Conv 1x1 (no bias) + batch norm, named `.0.weight` / `.1.*` as the reference's nn.Sequential."""
    return nn.CellList([_Weight((cout, cin, 1, 1)), FrozenBatchNorm(cout, eps)])


def _apply_proj(kn, proj, x, native, geometry):
    """A _proj on x; `native`, `geometry`: K.conv_affine_native(kn) (a 1x1 convolution's, the same for all)."""
    scale, shift = proj[1].affine()
    return K.conv2d_affine(kn, native, geometry, x, proj[0].weight, scale, shift)


class _ConvEncoder(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.model = HGNetV2Backbone(cfg.backbone)


class DetrModel(nn.Cell, K.ConvAffine):
    """The parts every version has, under the reference's names (`model.` in a checkpoint): backbone, input
    projections, hybrid encoder (`encoder`: the version's), decoder input projections, encoder heads (`coords` box
    outputs) and the decoder (`decoder`: the version's). Its input projections are 1x1 convolutions
    (`conv_settings`: the default ones)."""

    def __init__(self, cfg, encoder=None, decoder=None, coords=4):
        super().__init__()
        self.cfg = cfg
        eps = cfg.batch_norm_eps
        bb = cfg.backbone
        self.unprojected = cfg.UNPROJECTED
        # one projection per backbone map the encoder reads, sized as the stage it reads
        projected = [bb.stage_out_channels[i - 1] for i in bb.out_indices[self.unprojected:]]
        self.backbone = _ConvEncoder(cfg)
        self.encoder_input_proj = nn.CellList([_proj(c, cfg.encoder_hidden_dim, eps) for c in projected])
        self.encoder = encoder if encoder is not None else HybridEncoder(cfg)
        self.decoder_input_proj = nn.CellList([_proj(c, cfg.d_model, eps) for c in cfg.decoder_in_channels])
        self.enc_output = nn.CellList([Linear(cfg.d_model, cfg.d_model), LayerNorm(cfg.d_model, cfg.layer_norm_eps)])
        self.enc_score_head = Linear(cfg.d_model, cfg.num_labels)
        self.enc_bbox_head = MLPHead(cfg.d_model, cfg.d_model, coords, 3)
        self.decoder = decoder if decoder is not None else Decoder(cfg, coords)
        self.num_queries = cfg.num_queries
        self.quads = coords == 10
        self.front_extras = 0  # tensors front() passes to the heads (V3: prototypes; V4: the geometry head's map)

    def map_sizes(self, height, width):
        """The backbone's map sizes for an H x W input, one per returned stage (every stride-2 conv pads (k-1)//2,
        so each halves rounding up): the stem halves twice, then each stage with a downsample halves again."""
        bb = self.cfg.backbone
        h, w = -(-height // 4), -(-width // 4)
        sizes = []
        for i in range(len(bb.stage_in_channels)):
            if bb.stage_downsample[i]:
                h, w = -(-h // 2), -(-w // 2)
            sizes.append((h, w))
        return tuple(sizes[i - 1] for i in bb.out_indices)

    def host_inputs(self, height, width):
        """Tables for an H x W input, built on the host: AIFI position embeddings, anchors, valid mask, the encoder's
        map sizes."""
        shapes = self.map_sizes(height, width)[self.unprojected:]
        pos = tuple(self.encoder.position(*shapes[i]) for i in self.encoder.encode_proj_layers)
        anchor_shapes = shapes
        if self.cfg.anchor_image_size:  # the reference then builds its anchors once, for that size
            ah, aw = self.cfg.anchor_image_size
            anchor_shapes = tuple((int(ah / s), int(aw / s)) for s in self.cfg.feat_strides)
            if anchor_shapes != shapes:
                raise ValueError(f"{self.cfg.NAME}: anchor_image_size {self.cfg.anchor_image_size} gives maps "
                                 f"{anchor_shapes}, a {height}x{width} input {shapes}")
        a, valid = anchors(anchor_shapes, quads=self.quads)
        return pos, Tensor(a), Tensor(valid.astype(np.float32)), shapes

    def front(self, pixel_values, pos, anchor_logits, valid):
        """Backbone to query selection: (queries [B, Q, C], their references [B, Q, coords] in [0, 1], memory
        [B, S, C], what the version's heads read besides: a tuple)."""
        unprojected, proj = self.encode(pixel_values)
        maps, extras = self.fuse(proj, pos, unprojected)
        memory = self.flatten(maps)
        _, _, ref, target = self.propose(memory, anchor_logits, valid)
        return target, self.initial_reference(ref, target, extras), memory, extras

    def fuse(self, proj, pos, unprojected):
        """The encoder's maps and the extras the heads read (none here; V3 and V4 have theirs)."""
        return self.encoder(proj, pos), ()

    def initial_reference(self, ref_logits, target, extras):
        return ops.sigmoid(ref_logits)

    def box_head(self, i):
        """Layer i's box head (a Cell; the staged runner reads its weights)."""
        return self.decoder.bbox_embed[i]

    def encode(self, pixel_values):
        """Backbone maps: (the unprojected ones, the projected ones for the encoder)."""
        feats = self.backbone.model(pixel_values)
        proj = tuple(_apply_proj(self.kernels, p, f, self.native, self.geometry)
                     for p, f in zip(self.encoder_input_proj, feats[self.unprojected:]))
        return feats[:self.unprojected], proj

    def flatten(self, maps):
        """The encoder's maps through the decoder input projections, flattened: memory [B, S, C]."""
        sources = [_apply_proj(self.kernels, p, f, self.native, self.geometry)
                   for p, f in zip(self.decoder_input_proj, maps)]
        b, c = sources[0].shape[0], sources[0].shape[1]
        return ops.concat([s.reshape(b, c, -1).transpose(0, 2, 1) for s in sources], 1)

    def propose(self, memory_all, anchor_logits, valid):
        """Query selection: (encoder output memory [B, S, C], the top num_queries positions [B, Q], their
        references in logit space [B, Q, coords], their memory rows: the decoder's queries [B, Q, C])."""
        out_mem = self.enc_output[1](self.enc_output[0](valid * memory_all))
        scores = self.enc_score_head(out_mem)
        coords = self.enc_bbox_head(out_mem) + anchor_logits
        _, idx = ops.topk(ops.amax(scores, -1), self.num_queries)
        return out_mem, idx, take_rows(coords, idx), take_rows(out_mem, idx)


class LayoutModel(nn.Cell):
    """A version's top-level Cell (`model.` in checkpoints): host tables and heads by delegation to its model."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def host_inputs(self, height, width):
        return self.model.host_inputs(height, width)

    def back(self, x, ref, extra=None, coords=None):
        return self.model.back(x, ref, extra, coords)


class Detector(DetrModel):
    """PP-DocLayoutV2's detector: pixel_values [B, 3, H, W] -> (logits [B, Q, num_labels], boxes [B, Q, 4] as
    (cx, cy, w, h)), the last decoder layer's class head and refined boxes (a class and a box head per layer)."""

    def __init__(self, cfg):
        d = cfg.d_model
        decoder = Decoder(cfg)  # its heads set before it joins the model, so their names carry its path
        decoder.class_embed = nn.CellList([Linear(d, cfg.num_labels) for _ in range(cfg.decoder_layers)])
        decoder.bbox_embed = nn.CellList([MLPHead(d, d, 4, 3) for _ in range(cfg.decoder_layers)])
        super().__init__(cfg, decoder=decoder)

    def head(self, x):
        return self.decoder.class_embed[len(self.decoder.layers) - 1](x)

    def construct(self, pixel_values, pos, anchor_logits, valid, shapes):
        target, ref, memory, _ = self.front(pixel_values, pos, anchor_logits, valid)
        x, ref = refine(self.decoder, self.decoder.bbox_embed, True, target, memory, ref, shapes)
        return self.head(x), ref
