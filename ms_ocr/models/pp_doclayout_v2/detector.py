"""PP-DocLayoutV2's RT-DETR detector (transformers' PPDocLayoutV2Model at inference): HGNetV2 -> input projections
-> hybrid encoder -> decoder input projections -> anchor-based query selection (top num_queries encoder scores) ->
decoder layers (self-attention, multi-scale deformable attention, MLP; boxes refined layer by layer).
Outputs the last layer's class logits and boxes (cx, cy, w, h in [0, 1])."""

import numpy as np
from mindspore import Tensor, nn, ops

from ms_ocr import ops as K
from ms_ocr.models.pp_doclayout_v2.backbone import FrozenBatchNorm, HGNetV2Backbone, _Weight
from ms_ocr.models.pp_doclayout_v2.deformable import MultiscaleDeformableAttention
from ms_ocr.models.pp_doclayout_v2.encoder import HybridEncoder, SelfAttention, _MLP
from ms_ocr.nn.layers import LayerNorm, Linear

ANCHOR_GRID = 0.05
FP32_MAX = float(np.finfo(np.float32).max)


def anchors(shapes, grid=ANCHOR_GRID):
    """The reference's anchors for feature maps `shapes` [(H, W)]: logit-space (cx, cy, w, h) [1, S, 4] and the
    valid mask [1, S, 1] (every coordinate strictly inside (0.01, 0.99)); invalid anchors hold float32 max.
    Computed in float32 step by step as the reference does."""
    out = []
    for level, (h, w) in enumerate(shapes):
        gy, gx = np.meshgrid(np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32), indexing="ij")
        cx = (gx + np.float32(0.5)) / np.float32(w)
        cy = (gy + np.float32(0.5)) / np.float32(h)
        wh = np.full_like(cx, np.float32(grid) * np.float32(2.0 ** level))
        out.append(np.stack([cx, cy, wh, wh], -1).reshape(-1, 4))
    a = np.concatenate(out, 0)[None].astype(np.float32)
    valid = ((a > np.float32(1e-2)) & (a < np.float32(1 - 1e-2))).all(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        logit = np.log(a / (np.float32(1) - a)).astype(np.float32)
    return np.where(valid, logit, np.float32(FP32_MAX)).astype(np.float32), valid


def inverse_sigmoid(x, eps=1e-5):
    x = ops.clip(x, 0.0, 1.0)
    return ops.log(ops.clip(x, eps, None) / ops.clip(1 - x, eps, None))


class MLPHead(nn.Cell):
    """Linear layers with ReLU between (PPDocLayoutV2MLPPredictionHead)."""

    def __init__(self, cin, hidden, cout, layers):
        super().__init__()
        dims = [cin] + [hidden] * (layers - 1) + [cout]
        self.layers = nn.CellList([Linear(a, b) for a, b in zip(dims[:-1], dims[1:])])

    def construct(self, x):
        n = len(self.layers)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < n - 1:
                x = ops.relu(x)
        return x


def _proj(cin, cout, eps):
    """Conv 1x1 (no bias) + batch norm, named `.0.weight` / `.1.*` as the reference's nn.Sequential."""
    return nn.CellList([_Weight((cout, cin, 1, 1)), FrozenBatchNorm(cout, eps)])


def _apply_proj(proj, x):
    return proj[1](K.conv2d(x, proj[0].weight))


class DecoderLayer(nn.Cell):
    def __init__(self, cfg, levels):
        super().__init__()
        d, eps = cfg.d_model, cfg.layer_norm_eps
        self.self_attn = SelfAttention(d, cfg.decoder_attention_heads)
        self.self_attn_layer_norm = LayerNorm(d, eps)
        self.encoder_attn = MultiscaleDeformableAttention(d, cfg.decoder_attention_heads, levels, cfg.decoder_n_points)
        self.encoder_attn_layer_norm = LayerNorm(d, eps)
        self.mlp = _MLP(d, cfg.decoder_ffn_dim, cfg.decoder_activation_function)
        self.final_layer_norm = LayerNorm(d, eps)

    def construct(self, x, pos, memory, reference, shapes):
        x = self.self_attn_layer_norm(x + self.self_attn(x, pos))
        x = self.encoder_attn_layer_norm(x + self.encoder_attn(x, pos, memory, reference, shapes))
        return self.final_layer_norm(x + self.mlp(x))


class Decoder(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        levels = cfg.num_feature_levels
        self.layers = nn.CellList([DecoderLayer(cfg, levels) for _ in range(cfg.decoder_layers)])
        self.query_pos_head = MLPHead(4, 2 * cfg.d_model, cfg.d_model, 2)
        self.class_embed = nn.CellList([Linear(cfg.d_model, cfg.num_labels) for _ in range(cfg.decoder_layers)])
        self.bbox_embed = nn.CellList([MLPHead(cfg.d_model, cfg.d_model, 4, 3) for _ in range(cfg.decoder_layers)])

    def construct(self, target, memory, reference_logits, shapes):
        ref = ops.sigmoid(reference_logits)
        x = target
        for i, layer in enumerate(self.layers):
            x = layer(x, self.query_pos_head(ref), memory, ref, shapes)
            ref = ops.sigmoid(self.bbox_embed[i](x) + inverse_sigmoid(ref))
        return self.class_embed[len(self.layers) - 1](x), ref


class _ConvEncoder(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.model = HGNetV2Backbone(cfg.backbone)


class Detector(nn.Cell):
    """pixel_values [B, 3, H, W] -> (logits [B, Q, num_labels], boxes [B, Q, 4] as (cx, cy, w, h))."""

    def __init__(self, cfg):
        super().__init__()
        if cfg.num_feature_levels != len(cfg.decoder_in_channels) or cfg.learn_initial_query:
            raise ValueError("PP-DocLayoutV2: extra feature levels and learned initial queries are not supported")
        self.cfg = cfg
        eps = cfg.batch_norm_eps
        self.backbone = _ConvEncoder(cfg)
        self.encoder_input_proj = nn.CellList([_proj(c, cfg.encoder_hidden_dim, eps) for c in cfg.encoder_in_channels])
        self.encoder = HybridEncoder(cfg)
        self.decoder_input_proj = nn.CellList([_proj(c, cfg.d_model, eps) for c in cfg.decoder_in_channels])
        self.enc_output = nn.CellList([Linear(cfg.d_model, cfg.d_model), LayerNorm(cfg.d_model, cfg.layer_norm_eps)])
        self.enc_score_head = Linear(cfg.d_model, cfg.num_labels)
        self.enc_bbox_head = MLPHead(cfg.d_model, cfg.d_model, 4, 3)
        self.decoder = Decoder(cfg)
        self.num_queries = cfg.num_queries

    def host_inputs(self, height, width):
        """Tables for an H x W input, built on the host: AIFI position embeddings, anchors, valid mask, shapes."""
        # the backbone's map sizes (every stride-2 conv pads (k-1)//2, so each halves rounding up): the stem halves
        # twice, then each stage with a downsample halves again
        bb = self.cfg.backbone
        h, w = -(-height // 4), -(-width // 4)
        sizes = []
        for i in range(len(bb.stage_in_channels)):
            if bb.stage_downsample[i]:
                h, w = -(-h // 2), -(-w // 2)
            sizes.append((h, w))
        shapes = tuple(sizes[i - 1] for i in bb.out_indices)
        pos = tuple(self.encoder.position(*shapes[i]) for i in self.encoder.encode_proj_layers)
        a, valid = anchors(shapes)
        return pos, Tensor(a), Tensor(valid.astype(np.float32)), shapes

    def construct(self, pixel_values, pos, anchor_logits, valid, shapes):
        feats = self.backbone.model(pixel_values)
        proj = tuple(_apply_proj(p, f) for p, f in zip(self.encoder_input_proj, feats))
        enc = self.encoder(proj, pos)
        sources = [_apply_proj(p, f) for p, f in zip(self.decoder_input_proj, enc)]
        b, c = sources[0].shape[0], sources[0].shape[1]
        memory_all = ops.concat([s.reshape(b, c, -1).transpose(0, 2, 1) for s in sources], 1)  # [B, S, C]
        memory = valid * memory_all
        out_mem = self.enc_output[1](self.enc_output[0](memory))
        scores = self.enc_score_head(out_mem)
        coords = self.enc_bbox_head(out_mem) + anchor_logits
        _, idx = ops.topk(ops.amax(scores, -1), self.num_queries)  # [B, Q]
        gather_idx = (idx + (ops.arange(b, dtype=idx.dtype) * memory.shape[1])[:, None]).reshape(-1)
        ref = ops.gather(coords.reshape(-1, 4), gather_idx, 0).reshape(b, self.num_queries, 4)
        target = ops.gather(out_mem.reshape(-1, c), gather_idx, 0).reshape(b, self.num_queries, c)
        return self.decoder(target, memory_all, ref, shapes)

