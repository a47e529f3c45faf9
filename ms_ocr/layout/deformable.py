"""Multi-scale deformable attention (Deformable DETR, as transformers' PPDocLayoutV2/V3/V4
MultiscaleDeformableAttention computes it). The sampling is one native kernel where routed (DeformableSample,
ops/native/conv.cc), else a composed bilinear sampler: the four neighbours of every sampling point are gathered
from the flattened value maps, so no grid_sample kernel is needed.

grid_sample(bilinear, padding zeros, align_corners=False) at a location (x, y) in [0, 1] of an H x W map reads
pixel coordinates px = x*W - 0.5, py = y*H - 0.5 and mixes the 4 surrounding pixels, each outside the map counting 0.
"""

import mindspore as ms
from mindspore import Tensor, nn, ops

from ms_ocr import ops as K
from ms_ocr.nn import functional as F
from ms_ocr.nn.layers import Linear


def bilinear_gather(table, base, px, py, height, width):
    """Bilinear samples of rows of `table` [R, D]: a map is rows base + y*width + x. px, py [...] float pixel
    coordinates (grid_sample's align_corners=False convention). Returns [..., D]."""
    x0 = ops.floor(px)
    y0 = ops.floor(py)
    fx = px - x0
    fy = py - y0
    x0 = x0.astype(ms.int32)
    y0 = y0.astype(ms.int32)
    out = None
    for dy, dx, w in ((0, 0, (1 - fx) * (1 - fy)), (0, 1, fx * (1 - fy)), (1, 0, (1 - fx) * fy), (1, 1, fx * fy)):
        xi, yi = x0 + dx, y0 + dy
        inside = (xi >= 0) & (xi < width) & (yi >= 0) & (yi < height)
        idx = base + ops.clip(yi, 0, height - 1) * width + ops.clip(xi, 0, width - 1)
        val = ops.gather(table, idx.reshape(-1), 0).reshape(idx.shape + (table.shape[-1],))
        term = val * (w * inside.astype(w.dtype))[..., None]
        out = term if out is None else out + term
    return out


def deformable_attention(kn, hidden, pos, memory, reference, shapes, weights, heads, levels, points):
    """hidden [B, Q, C] queries (+ pos); memory [B, S, C] the flattened maps of `shapes` ((H, W) per level, a static
    tuple); reference [B, Q, 4] boxes (cx, cy, w, h) in [0, 1]; weights (sampling_offsets, attention_weights,
    value_proj, output_proj: weight and bias each). The sampling: `kn`'s DeformableSample where routed, else the
    composed sampler. Returns [B, Q, C]."""
    sow, sob, aww, awb, vpw, vpb, opw, opb = weights
    b, q, c = hidden.shape
    s = memory.shape[1]
    nh, nl, npt, dh = heads, levels, points, c // heads
    h = hidden + pos
    value = F.linear(kn, memory, vpw, vpb)  # [B, S, C]
    offsets = F.linear(kn, h, sow, sob).reshape(b, q, nh, nl, npt, 2)
    attn = ops.softmax(F.linear(kn, h, aww, awb).reshape(b, q, nh, nl * npt), -1).reshape(b, q, nh, nl, npt)
    # locations = centre + offset / points * size * 0.5 (x scaled by w, y by h)
    loc = reference[:, :, None, None, None, :2] + offsets / npt * reference[:, :, None, None, None, 2:] * 0.5
    native = K.deformable_native(kn)
    if native is not None:  # one kernel for the samples and their weighted sum
        return F.linear(kn, native(value, loc, attn, Tensor(shapes, ms.int32)), opw, opb)
    value = value.reshape(b, s, nh, dh).transpose(0, 2, 1, 3).reshape(b * nh * s, dh)
    # row of (batch b, head h) in the value table: (b * nh + h) * s
    head_base = (ops.arange(b * nh, dtype=ms.int32) * s).reshape(b, 1, nh, 1)
    out = None
    start = 0
    for lvl in range(nl):
        height, width = shapes[lvl]
        px = loc[:, :, :, lvl, :, 0] * width - 0.5   # [B, Q, nH, nP]
        py = loc[:, :, :, lvl, :, 1] * height - 0.5
        sampled = bilinear_gather(value, head_base + start, px, py, height, width)  # [B, Q, nH, nP, dh]
        term = (sampled * attn[:, :, :, lvl, :, None]).sum(3)  # [B, Q, nH, dh]
        out = term if out is None else out + term
        start += height * width
    return F.linear(kn, out.reshape(b, q, c), opw, opb)


class MultiscaleDeformableAttention(nn.Cell):
    """Weights under the reference's names: sampling_offsets, attention_weights, value_proj, output_proj."""

    def __init__(self, d_model, heads, levels, points):
        super().__init__()
        self.heads, self.levels, self.points = heads, levels, points
        self.sampling_offsets = Linear(d_model, heads * levels * points * 2)
        self.attention_weights = Linear(d_model, heads * levels * points)
        self.value_proj = Linear(d_model, d_model)
        self.output_proj = Linear(d_model, d_model)

    def weights(self):
        return (self.sampling_offsets.weight, self.sampling_offsets.bias, self.attention_weights.weight,
                self.attention_weights.bias, self.value_proj.weight, self.value_proj.bias, self.output_proj.weight,
                self.output_proj.bias)

    def construct(self, hidden, pos, memory, reference, shapes):
        return deformable_attention(self.kernels, hidden, pos, memory, reference, shapes, self.weights(), self.heads,
                                    self.levels, self.points)
