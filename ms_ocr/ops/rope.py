"""Rotary position embedding (rotate-half form): Ascend RotaryPositionEmbedding or composed."""

from mindspore import ops

from ms_ocr.ops import backend


def rotate_half(x):
    half = x.shape[-1] // 2
    return ops.concat((-x[..., half:], x[..., :half]), -1)


def apply_rope(x, cos, sin):
    """x * cos + rotate_half(x) * sin.

    x [B, H, S, D]; cos, sin [B|1, 1, S, D] holding the frequencies twice ([f, f]), as HF builds them.
    """
    if backend.FUSED:
        return ops.rotary_position_embedding(x, cos.astype(x.dtype), sin.astype(x.dtype), mode=0)
    return x * cos + rotate_half(x) * sin
