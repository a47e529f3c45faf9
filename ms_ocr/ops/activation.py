"""Activations written so graph mode fuses them (the single-op CPU kernels are several times slower)."""

import math

from mindspore import ops

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu_tanh(x):
    """GELU, tanh approximation (gelu_pytorch_tanh), using 0.5 * (1 + tanh(z)) == sigmoid(2z)."""
    return x * ops.sigmoid((2.0 * _SQRT_2_OVER_PI) * (x + 0.044715 * x * x * x))


def gelu_erf(x):
    """Exact GELU: 0.5 * x * (1 + erf(x / sqrt(2)))."""
    return 0.5 * x * (1.0 + ops.erf(x * (1.0 / math.sqrt(2.0))))


def quick_gelu(x):
    return x * ops.sigmoid(1.702 * x)


def silu(x):
    return x * ops.sigmoid(x)


ACTIVATIONS = {
    "gelu_pytorch_tanh": gelu_tanh,
    "gelu_new": gelu_tanh,
    "gelu": gelu_erf,
    "quick_gelu": quick_gelu,
    "silu": silu,
    "swish": silu,
}


def get_activation(name):
    if name not in ACTIVATIONS:
        raise ValueError(f"unsupported activation {name!r}; known: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]
