"""Rotary position embedding (rotate-half form): Ascend RotaryPositionEmbedding or composed."""

from mindspore import ops

from ms_ocr.ops import backend


def rotate_half(x):
    half = x.shape[-1] // 2
    return ops.concat((-x[..., half:], x[..., :half]), -1)


def apply_rope(x, cos, sin, paired=True):
    """x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]).

    x [B, H, S, D]; cos, sin [B|1, 1, S, D]. `paired` promises the tables repeat their first half
    ([f, f], as HF builds 1D/MRoPE tables), which lets the fallback work at half width. XD-RoPE tables
    (HunyuanOCR) take the two halves of a rotation pair from different position axes: pass paired=False.
    The fused op computes the general formula either way.
    """
    if backend.FUSED:
        return ops.rotary_position_embedding(x, cos.astype(x.dtype), sin.astype(x.dtype), mode=0)
    if not paired:
        return x * cos + rotate_half(x) * sin
    # cos/sin repeat their first half, so the rotation needs only half-width products and one concat
    # (x * cos + rotate_half(x) * sin materialises three full-width temporaries).
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[..., :half], sin[..., :half]
    return ops.concat((x1 * c - x2 * s, x2 * c + x1 * s), -1)
