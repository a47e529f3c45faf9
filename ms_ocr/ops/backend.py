"""Which kernel family runs: fused Ascend operators or composed fallbacks, decided once per process."""

import mindspore as ms
from mindspore import ops

from ms_ocr.ops import native

# Read by the ops at graph-compile time; set by `configure` before any model graph is built.
FUSED = False
# ONNX export: formulations built only from operators MindSpore's ONNX exporter converts.
PORTABLE = False
# CPU: the native matrix-vector Custom op (ms_ocr/ops/native, ops/linear.py), None where unavailable, on
# Ascend, and while graphs are built for export (the op names a library on this machine).
NATIVE_MATMUL_T = None
# CPU: the native fused decoder layer of a decode step (ops/decode_layer.py) as Custom ops for layers without
# and with q/k norms, None where the native matrix-vector op is (both come from the same library).
NATIVE_DECODE_LAYER = None
# CPU: the native bidirectional attention (vision encoders; ops/attention.py), None where the others are.
NATIVE_ATTENTION = None
# CPU: the native GELU (ops/activation.py) as Custom ops (tanh form, erf form), None where the others are.
NATIVE_GELU = None
_native_ops = {}  # Custom ops over the loaded library, made once per process
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
        self._native = without_native().__enter__()
        return self

    def __exit__(self, *exc):
        global PORTABLE
        PORTABLE = self._saved
        self._native.__exit__(*exc)


class without_native:
    """Context for building graphs to export (MindIR, ONNX): MindSpore's kernels only, no Custom ops that name a
    library of this machine."""

    def __enter__(self):
        global NATIVE_MATMUL_T, NATIVE_DECODE_LAYER, NATIVE_ATTENTION, NATIVE_GELU
        self._saved = NATIVE_MATMUL_T, NATIVE_DECODE_LAYER, NATIVE_ATTENTION, NATIVE_GELU
        NATIVE_MATMUL_T = NATIVE_DECODE_LAYER = NATIVE_ATTENTION = NATIVE_GELU = None
        return self

    def __exit__(self, *exc):
        global NATIVE_MATMUL_T, NATIVE_DECODE_LAYER, NATIVE_ATTENTION, NATIVE_GELU
        NATIVE_MATMUL_T, NATIVE_DECODE_LAYER, NATIVE_ATTENTION, NATIVE_GELU = self._saved


def configure(device_target=None):
    """Choose the kernel family from the device target ("Ascend" -> fused ops, anything else -> fallback).

    Called once by the model loader after the MindSpore context is set. Returns the target used.
    """
    global FUSED, NATIVE_MATMUL_T, NATIVE_DECODE_LAYER, NATIVE_ATTENTION, NATIVE_GELU, _configured
    target = device_target or ms.get_context("device_target")
    FUSED = target == "Ascend"
    NATIVE_MATMUL_T = native_matmul_t() if target == "CPU" else None
    NATIVE_DECODE_LAYER = native_decode_layers() if NATIVE_MATMUL_T is not None else None
    NATIVE_ATTENTION = native_attention() if NATIVE_MATMUL_T is not None else None
    NATIVE_GELU = native_gelu() if NATIVE_MATMUL_T is not None else None
    _configured = target
    return target


def native_kernels():
    """The loaded native kernel library when the configured CPU kernels use it, else None."""
    return native.load() if NATIVE_MATMUL_T is not None else None


def native_matmul_t():
    """The native x [M, K] w [N, K]^T Custom op (M <= 8, fp32), or None where the library is unavailable."""
    kernels = native.load()
    if kernels is None:
        return None
    if "matmul_t" not in _native_ops:
        _native_ops["matmul_t"] = ops.Custom(kernels.func("MatMulT"), out_shape=lambda x, w: [x[0], w[0]],
                                             out_dtype=lambda x, w: x, func_type="aot")
    return _native_ops["matmul_t"]


def _decode_layer_out_shape(*shapes):
    # x [B, 1, H]; this token's k and v [B, Hkv, 1, D] (k_cache, input 4, is [B, Hkv, T, D])
    b, hkv, _, d = shapes[4]
    return list(shapes[0]), [b, hkv, 1, d], [b, hkv, 1, d]


def native_decode_layers():
    """The native DecodeLayer Custom ops (ops/decode_layer.py) for layers (without, with) q/k norms."""
    if "decode_layer" not in _native_ops:
        func = native.load().func("DecodeLayer")
        _native_ops["decode_layer"] = tuple(
            ops.Custom(func, out_shape=_decode_layer_out_shape, out_dtype=lambda *dtypes: (dtypes[0],) * 3,
                       func_type="aot") for _ in range(2))
    return _native_ops["decode_layer"]


def native_attention():
    """The native VisionAttention Custom op: q [B, H, S, D], k, v [B, H, T, D], scale [1] -> [B, H, S, D]."""
    if "attention" not in _native_ops:
        _native_ops["attention"] = ops.Custom(native.load().func("VisionAttention"), out_shape=lambda q, k, v, s: q,
                                              out_dtype=lambda q, k, v, s: q, func_type="aot")
    return _native_ops["attention"]


def native_gelu():
    """The native GELU Custom ops (tanh form, erf form): x -> GELU(x), fp32, any shape."""
    if "gelu" not in _native_ops:
        kernels = native.load()
        _native_ops["gelu"] = tuple(ops.Custom(kernels.func(name), out_shape=lambda x: x, out_dtype=lambda x: x,
                                               func_type="aot") for name in ("GeluTanh", "GeluErf"))
    return _native_ops["gelu"]


def configured_target():
    """The device target the kernels were chosen for, or None before `configure`."""
    return _configured
