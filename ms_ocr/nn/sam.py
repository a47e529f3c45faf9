"""SAM ViT-B image encoder as DeepSeek-OCR uses it (v1 and v2): patch conv, absolute position table,
pre-LN blocks with windowed or global attention plus decomposed relative-position bias, the conv neck and
two stride-2 convs (reference: transformers DeepseekOcr2SamVisionEncoder; names as the hub's `sam_model.*`).

Everything size-dependent is a host-made table passed in (`SamTables`): the bicubic-antialias resampling
matrix of the 64x64 position table, and per attention kind the linear resampling matrix of its relative
table plus the relative index grid, so one graph per input size computes exactly what the reference does.
"""

from dataclasses import dataclass

import numpy as np
from mindspore import nn, ops

from ms_ocr import ops as K
from ms_ocr.nn import functional as F
from ms_ocr.nn.blocks import WeightOrder
from ms_ocr.nn.layers import LayerNorm, Linear, zeros_param
from ms_ocr.ops import gelu_erf
from ms_ocr.processing.resample import bicubic_aa_matrix, linear_matrix, relative_index

_bmm_t = ops.BatchMatMul(transpose_b=True)
_bmm = ops.BatchMatMul()


@dataclass
class SamTables:
    pos: np.ndarray          # [g, table] bicubic-AA resampling of the position grid
    win_resize: np.ndarray   # [2w-1, rows of window tables]
    win_index: np.ndarray    # [w, w]
    glob_resize: np.ndarray  # [2g-1, rows of global tables]
    glob_index: np.ndarray   # [g, g]

    def arrays(self):
        return (self.pos, self.win_resize, self.win_index, self.glob_resize, self.glob_index)


def sam_tables(grid, table_grid, window):
    """Tables for a grid x grid token map; `table_grid` is the checkpoint's (64 for 1024-px SAM)."""
    return SamTables(pos=bicubic_aa_matrix(table_grid, grid),
                     win_resize=linear_matrix(2 * window - 1, 2 * window - 1), win_index=relative_index(window, window),
                     glob_resize=linear_matrix(2 * table_grid - 1, 2 * grid - 1),
                     glob_index=relative_index(grid, grid))


def sam_qkv_rel(kn, x, qkv_w, qkv_b, rel_pos_h, rel_pos_w, resize, index, heads):
    """x [B, h, w, C] (a window or the whole map) -> q, k, v [B, H, N, D] and the decomposed relative position
    terms rel_h [B, H, N, kh], rel_w [B, H, N, kw] (from the unscaled q, as mvitv2 / SAM)."""
    b, h, w, c = x.shape
    d = c // heads
    qkv = F.linear(kn, x, qkv_w, qkv_b).reshape(b, h * w, 3, heads, d)
    q, k, v = ops.split(qkv, 1, 2)
    q = q.reshape(b, h * w, heads, d).transpose(0, 2, 1, 3)
    k = k.reshape(b, h * w, heads, d).transpose(0, 2, 1, 3)
    v = v.reshape(b, h * w, heads, d).transpose(0, 2, 1, 3)
    rh = ops.gather(ops.matmul(resize, rel_pos_h), index, 0)  # [h, kh, D] (h == w here)
    rw = ops.gather(ops.matmul(resize, rel_pos_w), index, 0)
    qs = q.reshape(b * heads, h, w, d)
    rel_h = _bmm_t(qs.transpose(1, 0, 2, 3).reshape(h, -1, d), rh)  # [h, BH*w, kh]
    rel_h = rel_h.reshape(h, b * heads, w, h).transpose(1, 0, 2, 3).reshape(b, heads, h * w, h)
    rel_w = _bmm_t(qs.transpose(2, 0, 1, 3).reshape(w, -1, d), rw)  # [w, BH*h, kw]
    rel_w = rel_w.reshape(w, b * heads, h, w).transpose(1, 2, 0, 3).reshape(b, heads, h * w, w)
    return q, k, v, rel_h, rel_w


def sam_attend(q, k, v, rel_h, rel_w):
    """softmax(q k^T / sqrt(D) + rel_h (+) rel_w) v for a block of query rows: q, rel_* [B, H, r, .]."""
    b, heads, r, d = q.shape
    # expand_dims, not rel_h[..., :, None]: the ':' in an index is a full StridedSlice copy
    bias = (ops.expand_dims(rel_h, -1) + ops.expand_dims(rel_w, -2)).reshape(b, heads, r, -1)
    scores = _bmm_t(q * (d ** -0.5), k) + bias
    return _bmm(ops.softmax(scores, -1), v)


def window_partition(x, s):
    """Zero-pad [B, h, w, C] to multiples of s (after the norm, attended to like the reference: no mask) and
    cut s x s windows [B * nW, s, s, C]."""
    b, h, w, c = x.shape
    ph, pw = (s - h % s) % s, (s - w % s) % s
    # zero blocks concatenated rather than ops.pad: PadV3 has no ONNX export in MindSpore
    if ph:
        x = ops.concat((x, ops.zeros((b, ph, w, c), x.dtype)), 1)
    if pw:
        x = ops.concat((x, ops.zeros((b, h + ph, pw, c), x.dtype)), 2)
    hp, wp = h + ph, w + pw
    return x.reshape(b, hp // s, s, wp // s, s, c).transpose(0, 1, 3, 2, 4, 5).reshape(-1, s, s, c)


def window_unpartition(y, s, b, h, w):
    hp, wp = h + (s - h % s) % s, w + (s - w % s) % s
    c = y.shape[-1]
    y = y.reshape(b, hp // s, wp // s, s, s, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, c)
    # one axis per slice: MindSpore's CPU StridedSlice over two axes at once is many times slower
    return y[:, :h][:, :, :w]


def merge_rows(out, b, h, w):
    # [B, H, N, D] -> [B, h, w, H*D]
    heads, d = out.shape[1], out.shape[3]
    return out.transpose(0, 2, 1, 3).reshape(b, h, w, heads * d)


# One SAM block's weights, in the order the layerwise steps take them.
SAM_ATTN_IN = ("norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.rel_pos_h", "attn.rel_pos_w")
SAM_OUT = ("attn.proj.weight", "attn.proj.bias", "norm2.weight", "norm2.bias", "mlp.lin1.weight", "mlp.lin1.bias",
           "mlp.lin2.weight", "mlp.lin2.bias")


def sam_block_out(kn, x, attn_rows, weights, eps):
    """x + proj(attention) then + lin2(gelu(lin1(norm2(.)))): attn_rows [B, h, w, C] already un-windowed."""
    pw, pb, n2w, n2b, l1w, l1b, l2w, l2b = weights
    x = x + F.linear(kn, attn_rows, pw, pb)
    return x + F.linear(kn, gelu_erf(kn, F.linear(kn, F.layer_norm(kn, x, n2w, n2b, eps), l1w, l1b)), l2w, l2b)


def sam_block(kn, x, resize, index, weights, heads, window, eps):
    """A whole SAM block (windowed when `window`, else global); weights SAM_ATTN_IN + SAM_OUT."""
    n1w, n1b, qw, qb, rph, rpw = weights[:6]
    b, h, w, _ = x.shape
    y = F.layer_norm(kn, x, n1w, n1b, eps)
    if window:
        y = window_partition(y, window)
    q, k, v, rel_h, rel_w = sam_qkv_rel(kn, y, qw, qb, rph, rpw, resize, index, heads)
    out = merge_rows(sam_attend(q, k, v, rel_h, rel_w), y.shape[0], y.shape[1], y.shape[2])
    if window:
        out = window_unpartition(out, window, b, h, w)
    return sam_block_out(kn, x, out, weights[6:], eps)


class SamAttention(nn.Cell):
    """Parameter holder (qkv, proj, rel_pos_h/w); the math is sam_qkv_rel / sam_attend."""

    def __init__(self, dim, heads, table_rows):
        super().__init__()
        self.heads = heads
        self.qkv = Linear(dim, 3 * dim)
        self.proj = Linear(dim, dim)
        self.rel_pos_h = zeros_param((table_rows, dim // heads))
        self.rel_pos_w = zeros_param((table_rows, dim // heads))


class SamMLP(nn.Cell):
    def __init__(self, dim, hidden):
        super().__init__()
        self.lin1 = Linear(dim, hidden)
        self.lin2 = Linear(hidden, dim)

    def construct(self, x):
        return self.lin2(gelu_erf(self.kernels, self.lin1(x)))


class SamBlock(nn.Cell, WeightOrder):
    def __init__(self, dim, heads, mlp_dim, window, table_grid, eps):
        super().__init__()
        self.window, self.heads, self.eps = window, heads, eps
        self.norm1 = LayerNorm(dim, eps)
        self.attn = SamAttention(dim, heads, 2 * (window if window else table_grid) - 1)
        self.norm2 = LayerNorm(dim, eps)
        self.mlp = SamMLP(dim, mlp_dim)

    def construct(self, x, win_resize, win_index, glob_resize, glob_index):
        resize, index = (win_resize, win_index) if self.window else (glob_resize, glob_index)
        weights = (self.norm1.weight, self.norm1.bias, self.attn.qkv.weight, self.attn.qkv.bias,
                   self.attn.rel_pos_h, self.attn.rel_pos_w, self.attn.proj.weight, self.attn.proj.bias,
                   self.norm2.weight, self.norm2.bias, self.mlp.lin1.weight, self.mlp.lin1.bias,
                   self.mlp.lin2.weight, self.mlp.lin2.bias)
        return sam_block(self.kernels, x, resize, index, weights, self.heads, self.window, self.eps)


class LayerNorm2d(nn.Cell):
    """LayerNorm over the channels of an NHWC map (SAM's LayerNorm2d, applied channels-last here)."""

    def __init__(self, channels, eps=1e-6):
        super().__init__()
        self.weight = zeros_param((channels,))
        self.bias = zeros_param((channels,))
        self.eps = eps

    def construct(self, x):
        return F.layer_norm(self.kernels, x, self.weight, self.bias, self.eps)


class Conv(nn.Cell):
    """Conv2d without bias in the checkpoint's [out, in, k, k] layout, on NHWC input."""

    def __init__(self, cin, cout, kernel, stride=1, padding=0):
        super().__init__()
        self.weight = zeros_param((cout, cin, kernel, kernel))
        self.stride, self.padding = stride, padding

    def construct(self, x):
        y = K.conv2d(self.kernels, x.transpose(0, 3, 1, 2), self.weight, self.stride, self.padding)
        return y.transpose(0, 2, 3, 1)


class PatchConv(nn.Cell):
    """patch_embed.proj: stride == kernel conv with bias, as one matmul over the cut patches."""

    def __init__(self, cin, dim, patch):
        super().__init__()
        self.weight = zeros_param((dim, cin, patch, patch))
        self.bias = zeros_param((dim,))
        self.patch = patch

    def construct(self, pixels):
        b, c, hh, ww = pixels.shape
        p = self.patch
        x = pixels.reshape(b, c, hh // p, p, ww // p, p).transpose(0, 2, 4, 1, 3, 5).reshape(b, hh // p, ww // p, -1)
        y = K.linear_conv(self.kernels, x.reshape(-1, x.shape[-1]), self.weight, self.bias)
        return y.reshape(b, hh // p, ww // p, -1)


class SamPatchEmbed(nn.Cell):
    def __init__(self, cin, dim, patch):
        super().__init__()
        self.proj = PatchConv(cin, dim, patch)


class SamEncoder(nn.Cell):
    def __init__(self, dim=768, depth=12, heads=12, mlp_dim=3072, patch=16, image_size=1024, window=14,
                 global_layers=(2, 5, 8, 11), out_channels=256, downsample=(512, 1024), eps=1e-6):
        super().__init__()
        self.table_grid = image_size // patch
        self.window = window
        self.patch_embed = SamPatchEmbed(3, dim, patch)
        self.pos_embed = zeros_param((1, self.table_grid, self.table_grid, dim))
        self.blocks = nn.CellList([
            SamBlock(dim, heads, mlp_dim, 0 if i in global_layers else window, self.table_grid, eps)
            for i in range(depth)])
        self.neck = nn.CellList([Conv(dim, out_channels, 1), LayerNorm2d(out_channels),
                                 Conv(out_channels, out_channels, 3, padding=1), LayerNorm2d(out_channels)])
        self.net_2 = Conv(out_channels, downsample[0], 3, 2, 1)
        self.net_3 = Conv(downsample[0], downsample[1], 3, 2, 1)

    def tables(self, grid):
        return sam_tables(grid, self.table_grid, self.window)

    def embed(self, pixels, pos_m):
        x = self.patch_embed.proj(pixels)
        b, g, _, c = x.shape
        table = self.pos_embed.reshape(self.table_grid, -1)  # [T, T*C]
        pos = ops.matmul(pos_m, table).reshape(g, self.table_grid, c)  # rows resampled
        pos = _bmm(ops.broadcast_to(pos_m[None], (g, g, self.table_grid)), pos)  # columns: [g, g, C]
        return x + pos[None]

    def head(self, x):
        for layer in self.neck:
            x = layer(x)
        return self.net_3(self.net_2(x))

    def construct(self, pixels, pos_m, win_resize, win_index, glob_resize, glob_index):
        """pixels [B, 3, S, S] -> [B, S/64, S/64, downsample[1]] (NHWC), in one graph (small inputs; at the
        real size use SamLayerwise)."""
        x = self.embed(pixels, pos_m)
        for blk in self.blocks:
            x = blk(x, win_resize, win_index, glob_resize, glob_index)
        return self.head(x)


class _SamEmbedStep(nn.Cell):
    def __init__(self, sam):
        super().__init__(auto_prefix=False)
        self.sam = sam

    def construct(self, pixels, pos_m):
        return self.sam.embed(pixels, pos_m)


class _SamHeadStep(_SamEmbedStep):
    def construct(self, x):
        return self.sam.head(x)


class SamWindowBlockStep(nn.Cell):
    """Any windowed SAM block, weights as inputs (SAM_ATTN_IN + SAM_OUT)."""

    def __init__(self, kernels, heads, window, eps):
        super().__init__()
        self.kernels, self.heads, self.window, self.eps = kernels, heads, window, eps

    def construct(self, x, resize, index, n1w, n1b, qw, qb, rph, rpw, pw, pb, n2w, n2b, l1w, l1b, l2w, l2b):
        weights = (n1w, n1b, qw, qb, rph, rpw, pw, pb, n2w, n2b, l1w, l1b, l2w, l2b)
        return sam_block(self.kernels, x, resize, index, weights, self.heads, self.window, self.eps)


class SamGlobalInStep(nn.Cell):
    """norm1 + q/k/v + relative terms of a global block."""

    def __init__(self, kernels, heads, eps):
        super().__init__()
        self.kernels, self.heads, self.eps = kernels, heads, eps

    def construct(self, x, resize, index, n1w, n1b, qw, qb, rph, rpw):
        return sam_qkv_rel(self.kernels, F.layer_norm(self.kernels, x, n1w, n1b, self.eps), qw, qb, rph, rpw, resize,
                           index, self.heads)


class SamAttendStep(nn.Cell):
    def construct(self, q, k, v, rel_h, rel_w):
        return sam_attend(q, k, v, rel_h, rel_w)


class SamGlobalOutStep(nn.Cell):
    def __init__(self, kernels, eps):
        super().__init__()
        self.kernels, self.eps = kernels, eps

    def construct(self, x, attn, pw, pb, n2w, n2b, l1w, l1b, l2w, l2b):
        b, h, w, _ = x.shape
        return sam_block_out(self.kernels, x, merge_rows(attn, b, h, w), (pw, pb, n2w, n2b, l1w, l1b, l2w, l2b),
                             self.eps)


class SamLayerwise:
    """Runs a SamEncoder block by block through shared graphs (weights as inputs), global attention in
    query-row chunks, so activation memory is one block's (the CPU backend gives each graph a static pool
    with no reuse across ops: the whole 12-block graph at 1024 px would hold every block's activations at
    once)."""

    def __init__(self, sam, chunk=1024):
        self.sam, self.chunk = sam, chunk
        blk = sam.blocks[0]
        self.embed_step, self.head_step = _SamEmbedStep(sam), _SamHeadStep(sam)
        kn = sam.kernels  # the kernels bound to the encoder
        self.window_step = SamWindowBlockStep(kn, blk.heads, sam.window, blk.eps)
        self.global_in, self.attend, self.global_out = SamGlobalInStep(kn, blk.heads, blk.eps), SamAttendStep(), \
            SamGlobalOutStep(kn, blk.eps)

    def __call__(self, call, pixels, pos_m, win_resize, win_index, glob_resize, glob_index):
        """call(step, *args) runs a step (e.g. a CompileTimer's call); returns the SamEncoder output."""
        x = call(self.embed_step, pixels, pos_m)
        for blk in self.sam.blocks:
            if blk.window:
                x = call(self.window_step, x, win_resize, win_index, *blk.weights(SAM_ATTN_IN + SAM_OUT))
                continue
            q, k, v, rel_h, rel_w = call(self.global_in, x, glob_resize, glob_index, *blk.weights(SAM_ATTN_IN))
            n = q.shape[2]
            spans = [(s, min(s + self.chunk, n)) for s in range(0, n, self.chunk)]
            parts = [call(self.attend, F.rows(q, s, e, -2), k, v, F.rows(rel_h, s, e, -2), F.rows(rel_w, s, e, -2))
                     for s, e in spans]
            attn = parts[0] if len(parts) == 1 else ops.concat(parts, 2)
            x = call(self.global_out, x, attn, *blk.weights(SAM_OUT))
        return call(self.head_step, x)
