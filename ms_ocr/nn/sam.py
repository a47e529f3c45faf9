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

from ms_ocr.nn import functional as F
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


class SamAttention(nn.Cell):
    def __init__(self, dim, heads, table_rows):
        super().__init__()
        self.heads = heads
        self.qkv = Linear(dim, 3 * dim)
        self.proj = Linear(dim, dim)
        self.rel_pos_h = zeros_param((table_rows, dim // heads))
        self.rel_pos_w = zeros_param((table_rows, dim // heads))

    def construct(self, x, resize, index):
        """x [B, h, w, C] (a window or the whole map) -> [B, h, w, C]."""
        b, h, w, c = x.shape
        d = c // self.heads
        qkv = F.linear(x, self.qkv.weight, self.qkv.bias).reshape(b, h * w, 3, self.heads, d)
        q, k, v = ops.split(qkv, 1, 2)
        q = q.reshape(b, h * w, self.heads, d).transpose(0, 2, 1, 3)  # [B, H, N, D]
        k = k.reshape(b, h * w, self.heads, d).transpose(0, 2, 1, 3)
        v = v.reshape(b, h * w, self.heads, d).transpose(0, 2, 1, 3)
        # decomposed relative position bias from the unscaled q (mvitv2 / SAM)
        rh = ops.gather(ops.matmul(resize, self.rel_pos_h), index, 0)  # [h, kh, D] (h == w here)
        rw = ops.gather(ops.matmul(resize, self.rel_pos_w), index, 0)
        qs = q.reshape(b * self.heads, h, w, d)
        rel_h = _bmm_t(qs.transpose(1, 0, 2, 3).reshape(h, -1, d), rh)  # [h, BH*w, kh]
        rel_h = rel_h.reshape(h, b * self.heads, w, h).transpose(1, 0, 2, 3)  # [BH, h, w, kh]
        rel_w = _bmm_t(qs.transpose(2, 0, 1, 3).reshape(w, -1, d), rw)  # [w, BH*h, kw]
        rel_w = rel_w.reshape(w, b * self.heads, h, w).transpose(1, 2, 0, 3)  # [BH, h, w, kw]
        bias = (rel_h[..., :, None] + rel_w[..., None, :]).reshape(b, self.heads, h * w, h * w)
        scores = _bmm_t(q * (d ** -0.5), k) + bias
        out = _bmm(ops.softmax(scores, -1), v)  # [B, H, N, D]
        out = out.transpose(0, 2, 1, 3).reshape(b, h, w, c)
        return F.linear(out, self.proj.weight, self.proj.bias)


class SamMLP(nn.Cell):
    def __init__(self, dim, hidden):
        super().__init__()
        self.lin1 = Linear(dim, hidden)
        self.lin2 = Linear(hidden, dim)

    def construct(self, x):
        return self.lin2(gelu_erf(self.lin1(x)))


class SamBlock(nn.Cell):
    def __init__(self, dim, heads, mlp_dim, window, table_grid, eps):
        super().__init__()
        self.window = window
        self.norm1 = LayerNorm(dim, eps)
        self.attn = SamAttention(dim, heads, 2 * (window if window else table_grid) - 1)
        self.norm2 = LayerNorm(dim, eps)
        self.mlp = SamMLP(dim, mlp_dim)

    def construct(self, x, win_resize, win_index, glob_resize, glob_index):
        b, h, w, c = x.shape
        y = self.norm1(x)
        if self.window:
            s = self.window
            ph, pw = (s - h % s) % s, (s - w % s) % s
            if ph or pw:  # zero tokens after the norm, attended to like the reference (no mask)
                y = ops.pad(y, (0, 0, 0, pw, 0, ph))
            hp, wp = h + ph, w + pw
            y = y.reshape(b, hp // s, s, wp // s, s, c).transpose(0, 1, 3, 2, 4, 5).reshape(-1, s, s, c)
            y = self.attn(y, win_resize, win_index)
            y = y.reshape(b, hp // s, wp // s, s, s, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, c)
            y = y[:, :h, :w, :]
        else:
            y = self.attn(y, glob_resize, glob_index)
        x = x + y
        return x + self.mlp(self.norm2(x))


class LayerNorm2d(nn.Cell):
    """LayerNorm over the channels of an NHWC map (SAM's LayerNorm2d, applied channels-last here)."""

    def __init__(self, channels, eps=1e-6):
        super().__init__()
        self.weight = zeros_param((channels,))
        self.bias = zeros_param((channels,))
        self.eps = eps

    def construct(self, x):
        return F.layer_norm(x, self.weight, self.bias, self.eps)


class Conv(nn.Cell):
    """Conv2d without bias in the checkpoint's [out, in, k, k] layout, on NHWC input."""

    def __init__(self, cin, cout, kernel, stride=1, padding=0):
        super().__init__()
        self.weight = zeros_param((cout, cin, kernel, kernel))
        self.stride, self.padding = stride, padding

    def construct(self, x):
        y = ops.conv2d(x.transpose(0, 3, 1, 2), self.weight, None, self.stride,
                       "pad" if self.padding else "valid", self.padding)
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
        return F.linear(x, self.weight.reshape(self.weight.shape[0], -1), self.bias)


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

    def construct(self, pixels, pos_m, win_resize, win_index, glob_resize, glob_index):
        """pixels [B, 3, S, S] -> [B, S/64, S/64, downsample[1]] (NHWC)."""
        x = self.patch_embed.proj(pixels)
        b, g, _, c = x.shape
        table = self.pos_embed.reshape(self.table_grid, -1)  # [T, T*C]
        pos = ops.matmul(pos_m, table).reshape(g, self.table_grid, c)  # rows resampled
        pos = _bmm(ops.broadcast_to(pos_m[None], (g, g, self.table_grid)), pos)  # columns: [g, g, C]
        x = x + pos[None]
        for blk in self.blocks:
            x = blk(x, win_resize, win_index, glob_resize, glob_index)
        for layer in self.neck:
            x = layer(x)
        return self.net_3(self.net_2(x))
