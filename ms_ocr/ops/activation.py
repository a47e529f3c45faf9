"""Activations written so graph mode fuses them (the single-op CPU kernels are several times slower)."""

import math

import mindspore as ms
from mindspore import ops

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


# On the CPU both GELUs run as one native kernel pass (GeluTanh / GeluErf in ms_ocr/ops/native/activation.cc, the
# same formulas): composed, each is 6-12 elementwise kernels over a [rows, 4C] activation, a share of the vision
# towers' time that the one pass saves.
def _native_gelu(kn, x):
    return kn.gelu is not None and x.dtype == ms.float32


def gelu_tanh(kn, x):
    """GELU, tanh approximation (gelu_pytorch_tanh), using 0.5 * (1 + tanh(z)) == sigmoid(2z)."""
    if _native_gelu(kn, x):
        return kn.gelu[0](x)
    return x * ops.sigmoid((2.0 * _SQRT_2_OVER_PI) * (x + 0.044715 * x * x * x))


# Abramowitz & Stegun 7.1.26: erfc(a) = t (c0 + t (c1 + ... + t c4)) exp(-a^2), t = 1 / (1 + p a), a >= 0,
# absolute error <= 1.5e-7 (below fp32 resolution of GELU's output for |x| >= 1).
_ERFC_P = 0.3275911
_ERFC_C = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def gelu_erf(kn, x):
    """Exact (erf) GELU, 0.5 x (1 + erf(x / sqrt 2)), as fusable elementwise ops.

    With a = |x| / sqrt 2 and q = erfc(a): GELU = 0.5 (x + |x| (1 - q)) for either sign. Faster than ops.erf in
    graph mode; max |error| vs float64 7e-7 (ops.erf: 4e-7).
    """
    if _native_gelu(kn, x):
        return kn.gelu[1](x)
    a = ops.abs(x) * (1.0 / math.sqrt(2.0))
    d = 1.0 + _ERFC_P * a
    # ONNX has no converter for MindSpore's Reciprocal: the export formulation divides instead
    t = ops.div(ops.ones_like(d), d) if kn.portable else ops.reciprocal(d)
    c0, c1, c2, c3, c4 = _ERFC_C
    q = t * (c0 + t * (c1 + t * (c2 + t * (c3 + t * c4)))) * ops.exp(-a * a)
    return 0.5 * (x + ops.abs(x) * (1.0 - q))


def quick_gelu(kn, x):
    return x * ops.sigmoid(1.702 * x)


def silu(kn, x):
    return x * ops.sigmoid(x)


def relu(kn, x):
    return ops.relu(x)


ACTIVATIONS = {
    "gelu_pytorch_tanh": gelu_tanh,
    "gelu_new": gelu_tanh,
    "gelu": gelu_erf,
    "quick_gelu": quick_gelu,
    "silu": silu,
    "swish": silu,
    "relu": relu,
}


def get_activation(name):
    if name not in ACTIVATIONS:
        raise ValueError(f"unsupported activation {name!r}; known: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]
