"""Which kernel family runs: fused Ascend operators or composed fallbacks, decided once per process."""

import functools
import os
import sys

import mindspore as ms
from mindspore import ops

from ms_ocr.ops import native

# Read by the ops at graph-compile time; set by `configure` before any model graph is built.
FUSED = False
# ONNX export: formulations built only from operators MindSpore's ONNX exporter converts.
PORTABLE = False
# CPU: the Custom ops over the native kernel library (ms_ocr/ops/native, `native_ops`); all None where it is
# unavailable, on Ascend, and while graphs are built for export (the ops name a library on this machine).
NATIVE_MATMUL_T = None      # the matrix-vector product (ops/linear.py)
NATIVE_DECODE_LAYER = None  # a decode step's decoder layer, (without, with) q/k norms (ops/decode_layer.py)
NATIVE_ATTENTION = None     # unmasked attention (vision encoders; ops/attention.py)
NATIVE_CAUSAL_ATTENTION = None  # causal attention of a prompt (prefill; ops/attention.py)
NATIVE_GELU = None          # (tanh form, erf form) (ops/activation.py)
NATIVE_MOE_EXPERTS = None   # a decode step's routed experts of a MoE layer (ops/moe.py experts_decode)
NATIVE_VIT_HEADS = None     # a ViT layer's biased, heads-first, rotated q, k, v (nn/functional.py vit_attention_in)
NATIVE_LAYER_NORM = None    # LayerNorm over the last axis, fp32 (ops/norm.py)
# Unmasked attention written as rows [B, S, H * D] (ops/attention.py attention_rows): routed with NATIVE_ATTENTION.
NATIVE_ATTENTION_ROWS = None
# Weights kept in bf16 (device.bf16_resident): the embedding lookup of a bf16 table (ops/linear.py embedding_rows;
# MindSpore's CPU Gather has no bfloat16 kernel) and bf16 -> fp32 widening (ops/linear.py widen; MindSpore's CPU
# Cast from bfloat16 is scalar). Not in the route table (no composed path to measure against, or an
# exact copy); set wherever the library is loaded on the CPU.
NATIVE_GATHER_ROWS = None
NATIVE_WIDEN = None
# Rows of a position table resampled by K weighted taps each (ops/linear.py interp_rows): one output buffer where
# the composed gather-multiply-sum keeps three (a graph's [N, K, C] intermediates); set with the two above.
NATIVE_INTERP_ROWS = None
# --dtype bf16 on a CPU with bf16 dot products (enable_bf16_products): products of many rows against a bf16-resident
# weight in bf16 with fp32 accumulation (ops/linear.py matmul_t: GemmBf16 over MindSpore's oneDNN), and 2-D bf16
# weights are no longer widened for them (ops/linear.py keeps_bf16). None: every product computes in fp32.
BF16_PRODUCTS = None
# With BF16_PRODUCTS: the products with their epilogue on the computing thread (ops/linear.py linear_bias), a dict
# of "bias", "gelu_erf", "gelu_tanh" (the bias, then GELU) and "residual" (the bias, then a residual added) -> op.
BF16_EPILOGUES = None
BF16_PRODUCTS_ENV = "MS_OCR_BF16_PRODUCTS"  # "0": --dtype bf16 keeps the exact path (fp32 products on bf16 weights)
# With BF16_PRODUCTS on a CPU with AMX-BF16 (Intel Xeon, Sapphire Rapids on): a decode step's products against bf16
# weights on the tiles, activations rounded to bf16 — (MatMulTBf16, (DecodeLayerBf16 without, with q/k norms)), the
# native MatMulT / DecodeLayer's stand-ins where those are routed (ops/linear.py matmul_t, ops/decode_layer.py).
BF16_DECODE = None
# With BF16_PRODUCTS on a CPU with AMX-BF16 or AVX512_BF16: the VLM vision encoders' unmasked attention in bf16 —
# (VisionAttentionBf16, VisionAttentionBf16Rows), NATIVE_ATTENTION / NATIVE_ATTENTION_ROWS' stand-ins where the
# caller passes bf16_ok (ops/attention.py; the layout model does not), for head dims up to BF16_ATTENTION_MAX_DIM:
# on the tiles up to AMX_ATTENTION_MAX_DIM, with VDPBF16PS (AVX512_BF16: AMD Zen 4 on) up to DPBF16_ATTENTION_MAX_DIM
# (kernels.cc kAmxMaxDim, kDpMaxDim).
BF16_ATTENTION = None
BF16_ATTENTION_MAX_DIM = None
AMX_ATTENTION_MAX_DIM = 96
DPBF16_ATTENTION_MAX_DIM = 256
AMX_ENV = "MS_OCR_AMX"  # "0": no AMX tiles (the decode step stays fp32; the vision attention takes AVX512_BF16)
# (MatMulTQ8, DequantQ8): --quantize int8's products (ops/linear.py matmul_t_q8, dequant_q8); set wherever the
# library is loaded on the CPU, like the bf16 ops.
NATIVE_Q8 = None
# Conv2dAffine (a convolution with its per-channel affine, activation and residual: the layout models' convolutions,
# ops/conv.py conv2d_affine): a function (stride, padding, dilation) -> its Custom op, where the library has MindSpore's
# oneDNN fp32 gemm and its level is in CONV_ROUTES. Measured on an Intel Xeon (family 6 model 167, 2 threads,
# AVX-512 build), PP-DocLayoutV4 at its real config, 800x800: docs in ms_ocr/layout/README.md ("Speed").
NATIVE_CONV = None
CONV_ROUTES = ("avx512",)
# DeformableSample (multi-scale deformable attention's sampling: the layout decoders, ms_ocr/layout/deformable.py),
# routed with NATIVE_CONV (the same levels): one kernel where the composed sampler is ~100 gathers and products per
# decoder layer.
NATIVE_DEFORMABLE = None
_native_ops = {}  # library path -> its Custom ops, made once per process
_configured = None

# The native kernels routed at each SIMD level of the built library (native.NativeKernels.isa_level): only those
# measured faster than MindSpore's composed path at that level, each route in its own process on real-size
# shapes (scripts/bench_kernels.py; the figures: docs/native-kernels.md, every run in docs/journal/native-kernels.md).
# VisionAttention is not routed below AVX-512: at AVX2 and SSE2 it measured slower than the composed attention
# (whose MindSpore kernels ran AVX-512 on that machine). A level without measurements (neon: only run for
# correctness under qemu-user so far; scalar) routes none. CausalAttention (the prefill's attention, which keeps
# no score buffers in the layer graph) measured faster, and the run's peak memory lower, at AVX2 and AVX-512; SSE2
# not measured. MoeExperts (DeepSeek's routed experts in decode), ViTHeads (a ViT layer's bias adds, head
# transposes and rope in one pass) and LayerNormRows: docs/journal/native-kernels.md.
# MS_OCR_NATIVE_ROUTES ("all", "none" or a comma list of KERNELS) overrides the table, e.g. to measure a level.
KERNELS = ("matmul_t", "decode_layer", "attention", "gelu", "causal_attention", "moe_experts", "vit_heads",
           "layer_norm")
NATIVE_ROUTES = {
    "avx512": ("matmul_t", "decode_layer", "attention", "gelu", "causal_attention", "moe_experts", "vit_heads",
               "layer_norm"),
    "avx2": ("matmul_t", "decode_layer", "gelu", "causal_attention", "moe_experts", "vit_heads", "layer_norm"),
    "sse2": ("matmul_t", "decode_layer", "gelu"),
    "neon": (),
    "scalar": (),
}
ROUTES_ENV = "MS_OCR_NATIVE_ROUTES"


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


# what enable_bf16_products sets (once per process)
BF16_NAMES = ("BF16_PRODUCTS", "BF16_EPILOGUES", "BF16_DECODE", "BF16_ATTENTION", "BF16_ATTENTION_MAX_DIM")
# every native op above: what `without_native` clears
_NATIVE_NAMES = ("NATIVE_MATMUL_T", "NATIVE_DECODE_LAYER", "NATIVE_ATTENTION", "NATIVE_CAUSAL_ATTENTION", "NATIVE_GELU",
                 "NATIVE_MOE_EXPERTS", "NATIVE_VIT_HEADS", "NATIVE_LAYER_NORM", "NATIVE_ATTENTION_ROWS",
                 "NATIVE_GATHER_ROWS", "NATIVE_WIDEN", "NATIVE_INTERP_ROWS", "NATIVE_Q8", "NATIVE_CONV", "NATIVE_DEFORMABLE") + BF16_NAMES


class without_native:
    """Context for building graphs to export (MindIR, ONNX): MindSpore's kernels only, no Custom ops that name a
    library of this machine."""

    def __enter__(self):
        names = globals()
        self._saved = {name: names[name] for name in _NATIVE_NAMES}
        names.update(dict.fromkeys(_NATIVE_NAMES))
        return self

    def __exit__(self, *exc):
        globals().update(self._saved)


def native_routes(isa_level):
    """The kernels routed for a library of `isa_level`: NATIVE_ROUTES, or MS_OCR_NATIVE_ROUTES when set."""
    override = os.environ.get(ROUTES_ENV)
    if override is None:
        return tuple(NATIVE_ROUTES.get(isa_level, ()))
    names = [n.strip() for n in override.split(",") if n.strip()]
    if names == ["all"]:
        return KERNELS
    if names == ["none"]:
        return ()
    unknown = sorted(set(names) - set(KERNELS))
    if unknown:
        print(f"[ms_ocr] {ROUTES_ENV}: unknown kernels {unknown} ignored (known: all, none, {', '.join(KERNELS)})",
              file=sys.stderr)
    return tuple(n for n in KERNELS if n in names)


def configure(device_target=None):
    """Choose the kernel family from the device target ("Ascend" -> fused ops, anything else -> fallback) and,
    on the CPU, the native kernels routed at the library's SIMD level (`native_routes`).

    Called once by the model loader after the MindSpore context is set. Returns the target used.
    """
    global FUSED, NATIVE_MATMUL_T, NATIVE_DECODE_LAYER, NATIVE_ATTENTION, NATIVE_GELU, NATIVE_GATHER_ROWS, NATIVE_WIDEN
    global NATIVE_CAUSAL_ATTENTION, NATIVE_MOE_EXPERTS, NATIVE_INTERP_ROWS, NATIVE_Q8, NATIVE_VIT_HEADS
    global NATIVE_ATTENTION_ROWS, NATIVE_LAYER_NORM, NATIVE_CONV, NATIVE_DEFORMABLE, _configured
    target = device_target or ms.get_context("device_target")
    FUSED = target == "Ascend"
    kernels = native.load() if target == "CPU" else None
    NATIVE_GATHER_ROWS, NATIVE_WIDEN, NATIVE_INTERP_ROWS = bf16_ops(kernels) if kernels is not None else (None,) * 3
    NATIVE_Q8 = int8_ops(kernels) if kernels is not None else None
    chosen = (None,) * len(KERNELS)
    if kernels is not None:
        routes = native_routes(kernels.isa_level)
        chosen = tuple(op if name in routes else None for name, op in zip(KERNELS, native_ops(kernels)))
    (NATIVE_MATMUL_T, NATIVE_DECODE_LAYER, NATIVE_ATTENTION, NATIVE_GELU, NATIVE_CAUSAL_ATTENTION,
     NATIVE_MOE_EXPERTS, NATIVE_VIT_HEADS, NATIVE_LAYER_NORM) = chosen
    NATIVE_ATTENTION_ROWS = attention_rows_op(kernels) if NATIVE_ATTENTION is not None else None
    NATIVE_CONV = NATIVE_DEFORMABLE = None
    if kernels is not None and kernels.isa_level in CONV_ROUTES and os.environ.get(ROUTES_ENV) != "none":
        NATIVE_DEFORMABLE = deformable_op(kernels)
        if kernels.load_dnnl() and kernels.has_sgemm:
            NATIVE_CONV = functools.partial(conv_affine_op, kernels)
    _configured = target
    return target


def routed():
    """The native kernels the configured ops use (names from KERNELS, and "bf16_products" / "amx_decode" /
    "amx_attention" / "dpbf16_attention" when enabled), for reports and the compile cache's key."""
    ops_ = (NATIVE_MATMUL_T, NATIVE_DECODE_LAYER, NATIVE_ATTENTION, NATIVE_GELU, NATIVE_CAUSAL_ATTENTION,
            NATIVE_MOE_EXPERTS, NATIVE_VIT_HEADS, NATIVE_LAYER_NORM)
    names = tuple(name for name, op in zip(KERNELS, ops_) if op is not None)
    return names + (("bf16_products",) if BF16_PRODUCTS is not None else ()) + \
        (("amx_decode",) if BF16_DECODE is not None else ()) + \
        (("amx_attention",) if BF16_ATTENTION is not None and BF16_DECODE is not None else ()) + \
        (("dpbf16_attention",) if BF16_ATTENTION_MAX_DIM == DPBF16_ATTENTION_MAX_DIM else ())


def enable_bf16_products():
    """Turn on products in bf16 for this process (--dtype bf16 on the CPU): returns None when on, else the reason
    they stay fp32 (no bf16 dot products on this CPU, no native kernel library, no oneDNN in MindSpore's wheel).
    Decided before any graph is built; every bf16-resident weight of the process is then read this way."""
    global BF16_PRODUCTS, BF16_EPILOGUES, BF16_DECODE, BF16_ATTENTION, BF16_ATTENTION_MAX_DIM
    if BF16_PRODUCTS is not None:
        return None
    if _configured != "CPU":
        return "not a CPU target"
    if os.environ.get(BF16_PRODUCTS_ENV) == "0":
        return f"{BF16_PRODUCTS_ENV}=0"
    kernels = native.load()
    if kernels is None or NATIVE_WIDEN is None:
        return "the native kernel library is unavailable"
    if not native.cpu_bf16_dot():
        return "this CPU has no bf16 dot products (AVX512_BF16, AMX-BF16 or Arm BF16)"
    if not kernels.load_dnnl():
        return "MindSpore's oneDNN (mindspore/lib/libdnnl.so) was not found"
    BF16_PRODUCTS = bf16_gemm_op(kernels)
    BF16_EPILOGUES = bf16_epilogue_ops(kernels)
    amx, dpbf16 = kernels.amx_init(os.environ.get(AMX_ENV) != "0"), kernels.dpbf16_init(True)
    if amx:
        BF16_DECODE = bf16_decode_ops(kernels)
    if amx or dpbf16:
        BF16_ATTENTION = bf16_attention_ops(kernels)
        BF16_ATTENTION_MAX_DIM = DPBF16_ATTENTION_MAX_DIM if dpbf16 else AMX_ATTENTION_MAX_DIM
    return None


def bf16_attention_ops(kernels):
    """(VisionAttentionBf16, VisionAttentionBf16Rows) of a kernel library, made once: VisionAttention's and
    VisionAttentionRows' signatures (q [B, H, S, D], k, v, scale [1] -> [B, H, S, D] / [B, S, H * D])."""
    key = (kernels.path, "bf16_attention")
    if key not in _native_ops:
        _native_ops[key] = (
            ops.Custom(kernels.func("VisionAttentionBf16"), out_shape=_first, out_dtype=_first, func_type="aot"),
            ops.Custom(kernels.func("VisionAttentionBf16Rows"), out_shape=lambda q, k, v, s: [q[0], q[2], q[1] * q[3]],
                       out_dtype=_first, func_type="aot"))
    return _native_ops[key]


def bf16_decode_ops(kernels):
    """(MatMulTBf16, (DecodeLayerBf16 without, with q/k norms)) of a kernel library, made once: MatMulT's and
    DecodeLayer's signatures."""
    key = (kernels.path, "bf16_decode")
    if key not in _native_ops:
        _native_ops[key] = (
            ops.Custom(kernels.func("MatMulTBf16"), out_shape=lambda x, w: [x[0], w[0]], out_dtype=_first,
                       func_type="aot"),
            tuple(ops.Custom(kernels.func("DecodeLayerBf16"), out_shape=_decode_layer_out_shape,
                             out_dtype=lambda *dtypes: (dtypes[0],) * 3, func_type="aot") for _ in range(2)))
    return _native_ops[key]


def bf16_gemm_op(kernels):
    """The GemmBf16 Custom op of a kernel library (x [M, K], bf16 w [N, K] -> fp32 [M, N]), made once."""
    key = (kernels.path, "gemm_bf16")
    if key not in _native_ops:
        _native_ops[key] = ops.Custom(kernels.func("GemmBf16"), out_shape=lambda x, w: [x[0], w[0]],
                                      out_dtype=lambda x, w: ms.float32, func_type="aot")
    return _native_ops[key]


def bf16_epilogue_ops(kernels):
    """GemmBf16 with its epilogue (BF16_EPILOGUES' keys), made once: x [M, K], bf16 w [N, K], b [N] (, res [M, N])
    -> fp32 [M, N]."""
    key = (kernels.path, "gemm_bf16_epilogues")
    if key not in _native_ops:
        names = {"bias": "GemmBf16Bias", "gelu_erf": "GemmBf16BiasGeluErf", "gelu_tanh": "GemmBf16BiasGeluTanh",
                 "residual": "GemmBf16BiasResidual"}
        _native_ops[key] = {
            role: ops.Custom(kernels.func(name), out_shape=lambda x, w, *rest: [x[0], w[0]],
                             out_dtype=lambda *dtypes: ms.float32, func_type="aot")
            for role, name in names.items()}
    return _native_ops[key]


def attention_rows_op(kernels):
    """The VisionAttentionRows Custom op of a kernel library, made once: q [B, H, S, D], k, v, scale [1] ->
    [B, S, H * D]."""
    key = (kernels.path, "attention_rows")
    if key not in _native_ops:
        _native_ops[key] = ops.Custom(kernels.func("VisionAttentionRows"),
                                      out_shape=lambda q, k, v, s: [q[0], q[2], q[1] * q[3]],
                                      out_dtype=lambda *dtypes: dtypes[0], func_type="aot")
    return _native_ops[key]


def native_kernels():
    """The loaded native kernel library when the configured CPU kernels use any of it, else None."""
    return native.load() if routed() else None


def _decode_layer_out_shape(*shapes):
    # x [B, 1, H]; this token's k and v [B, Hkv, 1, D] (k_cache, input 4, is [B, Hkv, T, D])
    b, hkv, _, d = shapes[4]
    return list(shapes[0]), [b, hkv, 1, d], [b, hkv, 1, d]


def _vit_heads_shape(yq, yk, yv, qb, kb, vb, cos, sin):
    # [N, H * D] -> [1, H, N, D] each, D the rope tables' last axis
    d = cos[-1]
    return ([1, yq[1] // d, yq[0], d],) * 3


def _first(*args):
    return args[0]


def native_ops(kernels):
    """The Custom ops over a loaded kernel library, made once per library, in KERNELS order: (MatMulT, (DecodeLayer
    without, with q/k norms), VisionAttention, (GeluTanh, GeluErf), CausalAttention, MoeExperts, ViTHeads,
    LayerNormRows) — what `configure` routes to (tests pass other builds)."""
    if kernels.path not in _native_ops:
        def custom(name, out_shape, out_dtype=_first):
            return ops.Custom(kernels.func(name), out_shape=out_shape, out_dtype=out_dtype, func_type="aot")

        _native_ops[kernels.path] = (
            custom("MatMulT", lambda x, w: [x[0], w[0]]),
            tuple(custom("DecodeLayer", _decode_layer_out_shape, lambda *dtypes: (dtypes[0],) * 3)
                  for _ in range(2)),
            custom("VisionAttention", _first),
            tuple(custom(name, _first) for name in ("GeluTanh", "GeluErf")),
            custom("CausalAttention", _first),
            custom("MoeExperts", lambda h, *rest: list(h)),
            custom("ViTHeads", _vit_heads_shape, lambda *dtypes: (dtypes[0],) * 3),
            custom("LayerNormRows", _first))
    return _native_ops[kernels.path]


def conv_affine_op(kernels, stride, padding, dilation):
    """The Conv2dAffine Custom op of a kernel library for one (stride, padding, dilation), made once: x [B, C, H, W],
    w [O, C / groups, kh, kw], scale [O], shift [O], geometry int32 [6] [, res] -> [B, O, OH, OW]."""
    key = (kernels.path, "conv", stride, padding, dilation)
    if key not in _native_ops:
        def shape(x, w, *rest):
            return [x[0], w[0], (x[2] + 2 * padding - dilation * (w[2] - 1) - 1) // stride + 1,
                    (x[3] + 2 * padding - dilation * (w[3] - 1) - 1) // stride + 1]

        _native_ops[key] = ops.Custom(kernels.func("Conv2dAffine"), out_shape=shape, out_dtype=_first, func_type="aot")
    return _native_ops[key]


def deformable_op(kernels):
    """The DeformableSample Custom op of a kernel library, made once: value [B, S, C], loc [B, Q, heads, L, P, 2],
    weight [B, Q, heads, L, P], shapes int32 [L, 2] -> [B, Q, C]."""
    key = (kernels.path, "deformable")
    if key not in _native_ops:
        _native_ops[key] = ops.Custom(kernels.func("DeformableSample"), out_shape=lambda v, loc, w, hw: [v[0], loc[1], v[2]],
                                      out_dtype=_first, func_type="aot")
    return _native_ops[key]


def _gather_rows_shape(table, ids):
    return list(ids) + list(table[1:])


def bf16_ops(kernels):
    """(GatherRows, WidenBf16, InterpRows) of a kernel library, made once: rows of a bf16 or fp32 table widened to
    fp32, a bf16 tensor widened to fp32, and rows of a table resampled by weighted taps."""
    key = (kernels.path, "bf16")
    if key not in _native_ops:
        _native_ops[key] = (
            ops.Custom(kernels.func("GatherRows"), out_shape=_gather_rows_shape,
                       out_dtype=lambda table, ids: ms.float32, func_type="aot"),
            ops.Custom(kernels.func("WidenBf16"), out_shape=_first, out_dtype=lambda x: ms.float32,
                       func_type="aot"),
            ops.Custom(kernels.func("InterpRows"), out_shape=lambda table, idx, w: [idx[0], table[1]],
                       out_dtype=lambda *dtypes: ms.float32, func_type="aot"))
    return _native_ops[key]


def int8_ops(kernels):
    """(MatMulTQ8, DequantQ8, DequantQ8 to bf16) of a kernel library, made once: a few rows against an int8 weight
    with per-row scales ((x q^T) * scale), and an int8 weight dequantised to fp32 (q * scale) or to bf16."""
    key = (kernels.path, "int8")
    if key not in _native_ops:
        _native_ops[key] = (
            ops.Custom(kernels.func("MatMulTQ8"), out_shape=lambda x, q, s: [x[0], q[0]],
                       out_dtype=lambda *dtypes: ms.float32, func_type="aot"),
            ops.Custom(kernels.func("DequantQ8"), out_shape=lambda q, s: list(q),
                       out_dtype=lambda *dtypes: ms.float32, func_type="aot"),
            ops.Custom(kernels.func("DequantQ8"), out_shape=lambda q, s: list(q),
                       out_dtype=lambda *dtypes: ms.bfloat16, func_type="aot"))
    return _native_ops[key]


def configured_target():
    """The device target the kernels were chosen for, or None before `configure`."""
    return _configured
