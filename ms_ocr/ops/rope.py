"""Rotary position embedding (rotate-half form): Ascend RotaryPositionEmbedding or composed."""

import numpy as np
import mindspore as ms
from mindspore import Tensor, ops
from mindspore.ops import functional as F


# Up to this many positions per sequence (decode steps) the composed rope swaps halves with one Gather and
# multiplies by a sign-folded sin table: 4 ops per tensor instead of 9. Decode is dominated by per-op dispatch
# (MindSpore's profiler on the PaddleOCR-VL decode step), so op count matters there; long sequences keep the
# half-width form, which moves less memory. A graph compiled for a dynamic length (MindIR export) always takes the
# long form: a shape-dependent branch there becomes control flow, which MindSpore's export path fails on.
SHORT_SEQ = 4


def rotate_half(x):
    half = x.shape[-1] // 2
    return ops.concat((-x[..., half:], x[..., :half]), -1)


def apply_rope(kn, x, cos, sin, paired=True):
    """x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]).

    x [B, H, S, D]; cos, sin [B|1, 1, S, D]. `paired` promises the tables repeat their first half
    ([f, f], as HF builds 1D/MRoPE tables), which lets the fallback work at half width. XD-RoPE tables
    (HunyuanOCR) take the two halves of a rotation pair from different position axes: pass paired=False.
    The fused op computes the general formula either way.
    """
    if kn.fused:
        return ops.rotary_position_embedding(x, cos.astype(x.dtype), sin.astype(x.dtype), mode=0)
    seq = x.shape[-2]
    if F.isconstant(seq) and seq <= SHORT_SEQ:  # decided at compile time: a dynamic length takes the long form
        return x * cos + swap_halves(x) * signed_sin(sin)
    if not paired:
        return x * cos + rotate_half(x) * sin
    # cos/sin repeat their first half, so the rotation needs only half-width products and one concat
    # (x * cos + rotate_half(x) * sin materialises three full-width temporaries).
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[..., :half], sin[..., :half]
    return ops.concat((x1 * c - x2 * s, x2 * c + x1 * s), -1)


def swap_halves(x):
    """concat(x[..., D/2:], x[..., :D/2]) as one Gather over a constant index (built with numpy at compile time:
    the same index as arange + modulo ran a FloorMod kernel every decode step)."""
    d = x.shape[-1]
    return ops.gather(x, Tensor(np.concatenate((np.arange(d // 2, d), np.arange(d // 2))).astype(np.int32)), x.ndim - 1)


def signed_sin(sin):
    """concat(-sin[..., :D/2], sin[..., D/2:]): rotate_half(x) * sin == swap_halves(x) * signed_sin(sin) exactly
    (negation commutes with rounding). The same table feeds every layer, so graph CSE computes it once."""
    half = sin.shape[-1] // 2
    return ops.concat((-sin[..., :half], sin[..., half:]), -1)


def vit_heads(kn, yq, yk, yv, qb, kb, vb, cos, sin, heads):
    """A ViT layer's q, k, v projections (yq, yk, yv [N, H * D], without their biases qb, kb, vb [H * D]) ->
    q, k, v [1, H, N, D] heads-first, the biases added and q, k rotated by the tables cos, sin [..., N, D]
    (`apply_rope`'s formula, paired tables). On the CPU the native ViTHeads does it in one pass (the same values
    bit for bit: each sum and product rounded as the composed ops round it)."""
    n, c = yq.shape
    d = c // heads
    if kn.vit_heads is not None and cos.shape[-1] == d and _all_fp32(yq, yk, yv, qb, kb, vb, cos, sin):
        return kn.vit_heads(yq, yk, yv, qb, kb, vb, cos, sin)
    q, k, v = ((y + b).reshape(n, heads, d).transpose(1, 0, 2)[None] for y, b in ((yq, qb), (yk, kb), (yv, vb)))
    return apply_rope(kn, q, cos, sin), apply_rope(kn, k, cos, sin), v


def _all_fp32(*tensors):
    """Whether every tensor is fp32 (decided at compile time)."""
    for t in tensors:
        if t.dtype != ms.float32:
            return False
    return True
