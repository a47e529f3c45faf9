"""RMSNorm kernel: Ascend fused RmsNorm or the composed T5-style norm."""

import mindspore as ms
from mindspore import ops

from ms_ocr.ops import backend


def rms_norm(x, weight, eps):
    """weight * x / sqrt(mean(x^2, -1) + eps), statistics in fp32, result in x's dtype times weight."""
    if backend.FUSED:
        return ops.rms_norm(x, weight, eps)[0]
    dtype = x.dtype
    xf = x.astype(ms.float32)
    var = ops.mean(xf * xf, -1, keep_dims=True)
    return weight * (xf * backend.rsqrt(var + eps)).astype(dtype)

