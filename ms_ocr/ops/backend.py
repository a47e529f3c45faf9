"""Which kernel family runs: fused Ascend operators or composed fallbacks, decided once per process."""

import mindspore as ms
from mindspore import ops

# Read by the ops at graph-compile time; set by `configure` before any model graph is built.
FUSED = False
# ONNX export: formulations built only from operators MindSpore's ONNX exporter converts.
PORTABLE = False
_configured = None


def rsqrt(x):
    """1 / sqrt(x): ops.rsqrt, or (PORTABLE) ones / sqrt, since MindSpore's ONNX exporter has no Rsqrt or
    Reciprocal converter (the norms multiply by it, as before the ONNX export existed)."""
    if PORTABLE:
        return ops.div(ops.ones_like(x), ops.sqrt(x))
    return ops.rsqrt(x)


class portable:
    """Context for building graphs to export to ONNX (the fallback kernels in exportable operators)."""

    def __enter__(self):
        global PORTABLE
        self._saved, PORTABLE = PORTABLE, True
        return self

    def __exit__(self, *exc):
        global PORTABLE
        PORTABLE = self._saved


def configure(device_target=None):
    """Choose the kernel family from the device target ("Ascend" -> fused ops, anything else -> fallback).

    Called once by the model loader after the MindSpore context is set. Returns the target used.
    """
    global FUSED, _configured
    target = device_target or ms.get_context("device_target")
    FUSED = target == "Ascend"
    _configured = target
    return target


def configured_target():
    """The device target the kernels were chosen for, or None before `configure`."""
    return _configured
