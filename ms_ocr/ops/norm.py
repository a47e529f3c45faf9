"""Norm kernels: RMSNorm (Ascend fused RmsNorm, the native RmsNormRows on the CPU, or the composed T5-style norm)
and LayerNorm (the native LayerNormRows on the CPU, MindSpore's LayerNorm operator, or composed for ONNX export)."""

import numpy as np
import mindspore as ms
from mindspore import Tensor, ops



def rsqrt(kn, x):
    """1 / sqrt(x): ops.rsqrt, or (kn.portable) ones / sqrt, since MindSpore's ONNX exporter has no Rsqrt or
    Reciprocal converter."""
    if kn.portable:
        return ops.div(ops.ones_like(x), ops.sqrt(x))
    return ops.rsqrt(x)


def rms_norm(kn, x, weight, eps):
    """weight * x / sqrt(mean(x^2, -1) + eps), statistics in fp32, result in x's dtype times weight. On the CPU the
    native RmsNormRows where routed (fp32 x and weight: a prompt's norms and q/k norms in the prefill graphs)."""
    if kn.fused:
        return ops.rms_norm(x, weight, eps)[0]
    if kn.rms_norm is not None and x.dtype == ms.float32 and weight.dtype == ms.float32:
        return kn.rms_norm(x, weight, Tensor(np.array([eps], np.float32)))
    dtype = x.dtype
    xf = x.astype(ms.float32)
    var = ops.mean(xf * xf, -1, keep_dims=True)
    return weight * (xf * rsqrt(kn, var + eps)).astype(dtype)


def layer_norm(kn, x, weight, bias, eps):
    """LayerNorm over the last axis. On the CPU the native LayerNormRows where routed (fp32); else MindSpore's
    LayerNorm operator (faster than the composed form on the CPU, as close to torch); the composed two-pass form
    of the ONNX export (kn.portable)."""
    if (kn.layer_norm is not None and x.dtype == ms.float32 and weight.dtype == ms.float32
            and bias.dtype == ms.float32):
        return kn.layer_norm(x, weight, bias, Tensor(np.array([eps], np.float32)))
    if not kn.portable:
        return ops.LayerNorm(-1, -1, eps)(x, weight, bias)[0]
    mean = ops.mean(x, -1, keep_dims=True)
    xc = x - mean
    var = ops.mean(xc * xc, -1, keep_dims=True)
    return xc * rsqrt(kn, var + eps) * weight + bias
