"""The PP-DocLayout models' hybrid encoder (RT-DETR): AIFI self-attention on the coarsest level, then the CCFM
top-down FPN and bottom-up PAN of CSP-RepVGG blocks (transformers' PPDocLayoutV2HybridEncoder, which V3 extends with
a mask head and V4 uses as it is), NCHW, inference only."""

import numpy as np
from mindspore import Tensor, nn, ops

from ms_ocr import ops as K
from ms_ocr.layout.backbone import FrozenBatchNorm, _Weight
from ms_ocr.nn import functional as F
from ms_ocr.nn.layers import LayerNorm, Linear
from ms_ocr.ops import get_activation


def sine_position_embedding(height, width, dim, temperature):
    """[H*W, dim] rows [sin(h w_k) | cos(h w_k) | sin(w w_k) | cos(w w_k)], w_k = temperature^(-k/(dim/4)),
    row-major, computed in float64 and rounded once to float32 as the reference does."""
    quarter = dim // 4
    omega = 1.0 / temperature ** (np.arange(quarter, dtype=np.float64) / quarter)
    gh, gw = np.meshgrid(np.arange(height, dtype=np.float64), np.arange(width, dtype=np.float64), indexing="ij")
    eh, ew = np.outer(gh.reshape(-1), omega), np.outer(gw.reshape(-1), omega)
    return np.concatenate([np.sin(eh), np.cos(eh), np.sin(ew), np.cos(ew)], 1).astype(np.float32)


class ConvNorm(nn.Cell, K.ConvAffine):
    """conv (no bias) -> batch norm (running statistics) -> optional activation; `residual` ("before" / "after" the
    activation) adds construct's `res`. One native kernel where routed (ops/conv.py conv2d_affine)."""

    def __init__(self, cin, cout, kernel, stride=1, padding=None, act=None, eps=1e-5, residual=None):
        super().__init__()
        self.conv = _Weight((cout, cin, kernel, kernel))
        self.norm = FrozenBatchNorm(cout, eps)
        self.stride, self.act, self.residual = stride, act, residual
        self.pad = (kernel - 1) // 2 if padding is None else padding
        self.conv_settings = (stride, self.pad, 1, 1, act, residual)

    def construct(self, x, res=None):
        scale, shift = self.norm.affine()
        return K.conv2d_affine(self.kernels, self.native, self.geometry, x, self.conv.weight, scale, shift, self.stride,
                               self.pad, 1, 1, self.act, res, self.residual)


class RepVggBlock(nn.Cell):
    """act(conv3x3+BN (x) + conv1x1+BN (x)): the 1x1 branch first, added inside the 3x3 one before its activation."""

    def __init__(self, dim, act, eps):
        super().__init__()
        self.conv1 = ConvNorm(dim, dim, 3, padding=1, eps=eps, act=act, residual="before")
        self.conv2 = ConvNorm(dim, dim, 1, padding=0, eps=eps)

    def construct(self, x):
        return self.conv1(x, self.conv2(x))


class CSPRepLayer(nn.Cell):
    def __init__(self, dim, act, eps, expansion):
        super().__init__()
        hidden = int(dim * expansion)
        if hidden != dim:
            raise ValueError("PP-DocLayout hidden_expansion other than 1.0 is not supported")
        self.conv1 = ConvNorm(2 * dim, hidden, 1, act=act, eps=eps)
        self.conv2 = ConvNorm(2 * dim, hidden, 1, act=act, eps=eps, residual="after")
        self.bottlenecks = nn.CellList([RepVggBlock(hidden, act, eps) for _ in range(3)])

    def construct(self, x):
        h = self.conv1(x)
        for block in self.bottlenecks:
            h = block(h)
        return self.conv2(x, h)  # h + conv2(x)


def self_attention(kn, x, pos, weights, heads):
    """Multi-head self-attention with the position embedding added to the query/key input only; weights (q, k, v,
    o projections' weight and bias, in that order)."""
    qw, qb, kw, kb, vw, vb, ow, ob = weights
    b, n, c = x.shape
    d = c // heads
    qk = x + pos

    def split(t):  # [B, N, C] -> [B, H, N, D]
        return t.reshape(b, n, heads, d).transpose(0, 2, 1, 3)

    out = K.attention(kn, split(F.linear(kn, qk, qw, qb)), split(F.linear(kn, qk, kw, kb)),
                      split(F.linear(kn, x, vw, vb)), None, d ** -0.5)
    return F.linear(kn, out.transpose(0, 2, 1, 3).reshape(b, n, c), ow, ob)


class SelfAttention(nn.Cell):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj = Linear(dim, dim), Linear(dim, dim)
        self.v_proj, self.o_proj = Linear(dim, dim), Linear(dim, dim)

    def weights(self):
        return (self.q_proj.weight, self.q_proj.bias, self.k_proj.weight, self.k_proj.bias, self.v_proj.weight,
                self.v_proj.bias, self.o_proj.weight, self.o_proj.bias)

    def construct(self, x, pos):
        return self_attention(self.kernels, x, pos, self.weights(), self.heads)


class _MLP(nn.Cell):
    def __init__(self, dim, ffn, act):
        super().__init__()
        self.fc1, self.fc2 = Linear(dim, ffn), Linear(ffn, dim)
        self.act = get_activation(act)

    def construct(self, x):
        return self.fc2(self.act(self.kernels, self.fc1(x)))


class EncoderLayer(nn.Cell):
    """Post-norm transformer layer (normalize_before False, the reference default)."""

    def __init__(self, dim, heads, ffn, act, eps):
        super().__init__()
        self.self_attn = SelfAttention(dim, heads)
        self.self_attn_layer_norm = LayerNorm(dim, eps)
        self.mlp = _MLP(dim, ffn, act)
        self.final_layer_norm = LayerNorm(dim, eps)

    def construct(self, x, pos):
        x = self.self_attn_layer_norm(x + self.self_attn(x, pos))
        return self.final_layer_norm(x + self.mlp(x))


class AIFILayer(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.CellList([
            EncoderLayer(cfg.encoder_hidden_dim, cfg.encoder_attention_heads, cfg.encoder_ffn_dim,
                         cfg.encoder_activation_function, cfg.layer_norm_eps) for _ in range(cfg.encoder_layers)])

    def construct(self, x, pos):
        """x [B, C, H, W]; pos [1, H*W, C] (zeros when the checkpoint's eval_size disables it)."""
        b, c, h, w = x.shape
        t = x.reshape(b, c, h * w).transpose(0, 2, 1)
        for layer in self.layers:
            t = layer(t, pos)
        return t.transpose(0, 2, 1).reshape(b, c, h, w)


def upsample2(x):
    """Nearest-neighbour x2 (F.interpolate(scale_factor=2, mode="nearest")) as a broadcast."""
    b, c, h, w = x.shape
    return ops.broadcast_to(x.reshape(b, c, h, 1, w, 1), (b, c, h, 2, w, 2)).reshape(b, c, 2 * h, 2 * w)


class HybridEncoder(nn.Cell):
    """Projected feature maps [s8, s16, s32] (each [B, C, H, W]) -> [P3, N4, N5]."""

    def __init__(self, cfg):
        super().__init__()
        dim, act, eps = cfg.encoder_hidden_dim, cfg.activation_function, cfg.batch_norm_eps
        self.cfg = cfg
        self.encode_proj_layers = tuple(cfg.encode_proj_layers)
        self.use_pos = cfg.eval_size is None  # the reference drops AIFI's position embedding when eval_size is set
        self.aifi = nn.CellList([AIFILayer(cfg) for _ in self.encode_proj_layers])
        stages = len(cfg.encoder_in_channels) - 1
        self.lateral_convs = nn.CellList([ConvNorm(dim, dim, 1, act=act, eps=eps) for _ in range(stages)])
        self.fpn_blocks = nn.CellList([CSPRepLayer(dim, act, eps, cfg.hidden_expansion) for _ in range(stages)])
        self.downsample_convs = nn.CellList([ConvNorm(dim, dim, 3, stride=2, act=act, eps=eps) for _ in range(stages)])
        self.pan_blocks = nn.CellList([CSPRepLayer(dim, act, eps, cfg.hidden_expansion) for _ in range(stages)])

    def position(self, height, width):
        """AIFI's position embedding for an H x W map: [1, H*W, C] host table (zeros when disabled)."""
        dim = self.cfg.encoder_hidden_dim
        if not self.use_pos:
            return Tensor(np.zeros((1, height * width, dim), np.float32))
        return Tensor(sine_position_embedding(height, width, dim, self.cfg.positional_encoding_temperature)[None])

    def construct(self, feats, pos):
        """feats: tuple of the projected maps; pos: AIFI position tables, one per encode_proj_layers entry."""
        return self.fuse(feats, pos)

    def fuse(self, feats, pos):
        feats = list(feats)
        if self.cfg.encoder_layers > 0:
            for i, level in enumerate(self.encode_proj_layers):
                feats[level] = self.aifi[i](feats[level], pos[i])
        n = len(self.lateral_convs)
        fpn = [feats[-1]]
        for idx in range(n):
            top = self.lateral_convs[idx](fpn[-1])
            fpn[-1] = top
            fpn.append(self.fpn_blocks[idx](ops.concat((upsample2(top), feats[n - idx - 1]), 1)))
        fpn = fpn[::-1]
        pan = [fpn[0]]
        for idx in range(n):
            down = self.downsample_convs[idx](pan[-1])
            pan.append(self.pan_blocks[idx](ops.concat((down, fpn[idx + 1]), 1)))
        return tuple(pan)

