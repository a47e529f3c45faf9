"""Which kernel serves each op: a frozen `Kernels`, chosen once (`choose`, `with_bf16_products`) from the device
target, the native library's SIMD level and the routes measured at it, and handed to the Cells (`bind`) and step
Cells that build graphs. The ops read it, as their `kn` argument, when a graph is compiled; nothing about the
choice is kept in a module.

Routes: a native kernel is routed at a SIMD level of the library (native.NativeKernels.isa_level) only where it
measured faster than MindSpore's composed path at that level, each route in its own process on real-size shapes
(scripts/bench_kernels.py; the figures: docs/native-kernels.md, every run in docs/journal/native-kernels.md).
VisionAttention is not routed below AVX-512: at AVX2 and SSE2 it measured slower than the composed attention (whose
MindSpore kernels ran AVX-512 on that machine). A level without measurements (neon: only run for correctness under
qemu-user so far; scalar) routes none. CausalAttention (the prefill's attention, which keeps no score buffers in the
layer graph) measured faster, and the run's peak memory lower, at AVX2 and AVX-512; SSE2 not measured. MoeExperts,
ViTHeads, LayerNormRows and RmsNormRows: docs/journal/native-kernels.md. GemmAmx (amx_products: the exact path's
products of many rows on the AMX tiles) is routed only where the CPU has the tiles and MS_OCR_AMX is not "0".
MS_OCR_NATIVE_ROUTES ("all", "none" or a comma list of KERNELS) overrides the table, e.g. to measure a level."""

import contextlib
import dataclasses
import functools
import os
import sys
from dataclasses import dataclass

from ms_ocr.ops import custom, native

KERNELS = ("matmul_t", "decode_layer", "attention", "gelu", "causal_attention", "moe_experts", "vit_heads",
           "layer_norm", "rms_norm", "amx_products")
ROUTES = {
    "avx512": ("matmul_t", "decode_layer", "attention", "gelu", "causal_attention", "moe_experts", "vit_heads",
               "layer_norm", "rms_norm", "amx_products"),
    "avx2": ("matmul_t", "decode_layer", "gelu", "causal_attention", "moe_experts", "vit_heads", "layer_norm",
             "rms_norm"),
    "sse2": ("matmul_t", "decode_layer", "gelu"),
    "neon": (),
    "scalar": (),
}
ROUTES_ENV = "MS_OCR_NATIVE_ROUTES"
# Conv2dAffine and DeformableSample (the layout models) are routed at these levels, where the library has MindSpore's
# oneDNN fp32 gemm: measured on an Intel Xeon (family 6 model 167, 2 threads, AVX-512 build), PP-DocLayoutV4 at its
# real config, 800x800 (ms_ocr/layout/README.md, "Speed").
CONV_ROUTES = ("avx512",)
BF16_PRODUCTS_ENV = "MS_OCR_BF16_PRODUCTS"  # "0": --dtype bf16 keeps the exact path (fp32 products on bf16 weights)
AMX_ENV = "MS_OCR_AMX"  # "0": no AMX tiles (the exact path's products of many rows stay MindSpore's fp32 MatMul; with
# --dtype bf16 the decode step stays fp32, the vision attention takes AVX512_BF16 and GemmBf16 oneDNN's bf16 GEMM)
# head dims the bf16 vision attention serves: on the AMX tiles, and with AVX512_BF16's VDPBF16PS (kernels.cc kAmxMaxDim,
# kDpMaxDim)
AMX_ATTENTION_MAX_DIM = 96
DPBF16_ATTENTION_MAX_DIM = 256


@dataclass(frozen=True)
class Kernels:
    """A process's kernel choice. None: the composed MindSpore formulation of that op (or, for `fused`, Ascend's
    fused operators). A Cell holds it as `self.kernels` (set by `bind`); a step Cell is given it."""

    fused: bool = False  # Ascend's fused operators (FlashAttentionScore, RmsNorm, rope, MoE dispatch)
    portable: bool = False  # formulations MindSpore's ONNX exporter converts (no Rsqrt, Reciprocal, native ops)
    library: object = None  # the native library the ops below name (reports, call counters), or None
    routes: tuple = ()  # names of what is routed (KERNELS, and the bf16 modes): reports, the compile cache's key
    # the route table's kernels (KERNELS), at the library's level
    matmul_t: object = None  # a few rows times a large weight (ops/linear.py)
    decode_layer: tuple = None  # a decode step's dense layer, (without, with q/k norms) (ops/decode_layer.py)
    attention: object = None  # unmasked attention (vision encoders)
    attention_rows: object = None  # the same written as rows [B, S, H * D], routed with `attention`
    causal_attention: object = None  # a prompt's causal attention (prefill)
    gelu: tuple = None  # (tanh form, erf form)
    moe_experts: object = None  # a decode step's routed experts
    vit_heads: object = None  # a ViT layer's biased, heads-first, rotated q, k, v
    layer_norm: object = None
    rms_norm: object = None  # a prompt's (or any fp32 block's) RMSNorm rows
    # exact conversions, wherever the library is loaded on the CPU: bf16 rows widened as gathered (MindSpore's CPU
    # Gather has no bfloat16 kernel), bf16 widened (its CPU Cast from bf16 is scalar), a position table resampled
    gather_rows: object = None
    widen: object = None
    interp_rows: object = None
    q8: tuple = None  # --quantize int8: (MatMulTQ8, DequantQ8 to fp32, to bf16)
    # the layout models: (stride, padding, dilation) -> Conv2dAffine, and DeformableSample
    conv: object = None
    deformable: object = None
    pad_max_pool: object = None  # HGNetV2's stem pooling (PadMaxPool2), routed with `conv`
    # --dtype bf16 on a CPU with bf16 dot products (with_bf16_products): GemmBf16, alone and with its epilogues
    gemm_bf16: object = None
    gemm_bf16_bias: object = None
    gemm_bf16_gelu_erf: object = None
    gemm_bf16_gelu_tanh: object = None
    gemm_bf16_residual: object = None
    amx_decode: tuple = None  # AMX: (MatMulTBf16, (DecodeLayerBf16 without, with q/k norms))
    # AMX, the exact path: many fp32 rows against a bf16 weight on the tiles, the fp32 product (GemmAmx alone, then
    # with each epilogue: custom.AMX_PRODUCTS' order)
    amx_products: tuple = None
    bf16_attention: tuple = None  # AMX or AVX512_BF16: (VisionAttentionBf16, VisionAttentionBf16Rows)
    bf16_attention_max_dim: int = None

    def without_native(self):
        """The same choice with MindSpore's kernels only: graphs built for export (MindIR, ONNX) must not name a
        library of this machine."""
        return Kernels(fused=self.fused, portable=self.portable)

    def for_onnx(self):
        """Formulations in operators MindSpore's ONNX exporter converts."""
        return dataclasses.replace(self.without_native(), portable=True)


COMPOSED = Kernels()  # MindSpore's own CPU kernels only
FUSED = Kernels(fused=True)


def native_routes(isa_level):
    """The kernels routed for a library of `isa_level`: ROUTES, or MS_OCR_NATIVE_ROUTES when set."""
    override = os.environ.get(ROUTES_ENV)
    if override is None:
        return tuple(ROUTES.get(isa_level, ()))
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


def choose(target):
    """The kernels for `target`: Ascend's fused operators, or on the CPU the native kernels routed at the library's
    level (native_routes) plus its exact conversions, where the library loads; MindSpore's composed kernels else."""
    if target == "Ascend":
        return FUSED
    library = native.load() if target == "CPU" else None
    if library is None:
        return COMPOSED
    routes = native_routes(library.isa_level)
    chosen = {name: op if name in routes else None for name, op in zip(KERNELS, custom.native_ops(library))}
    if os.environ.get(AMX_ENV) == "0" or not library.amx_products:  # routed only where the tiles are
        chosen["amx_products"] = None
    gather_rows, widen, interp_rows = custom.bf16_ops(library)
    conv = deformable = pad_max_pool = None
    if library.isa_level in CONV_ROUTES and os.environ.get(ROUTES_ENV) != "none":
        deformable = custom.deformable_op(library)
        pad_max_pool = custom.pad_max_pool_op(library)
        if library.load_dnnl() and library.has_sgemm:
            conv = functools.partial(custom.conv_affine_op, library)
    return Kernels(library=library, routes=tuple(name for name in KERNELS if chosen[name] is not None),
                   attention_rows=custom.attention_rows_op(library) if chosen["attention"] is not None else None,
                   gather_rows=gather_rows, widen=widen, interp_rows=interp_rows, q8=custom.int8_ops(library),
                   conv=conv, deformable=deformable, pad_max_pool=pad_max_pool, **chosen)


def bf16_products_refused(target, kernels):
    """Why `kernels` (chosen for `target`) cannot compute products in bf16 (None: they can): not a CPU, no native
    library, a CPU without bf16 dot products, no oneDNN in MindSpore's wheel, or switched off."""
    if target != "CPU":
        return "not a CPU target"
    if os.environ.get(BF16_PRODUCTS_ENV) == "0":
        return f"{BF16_PRODUCTS_ENV}=0"
    if kernels.library is None or kernels.widen is None:
        return "the native kernel library is unavailable"
    if not native.cpu_bf16_dot():
        return "this CPU has no bf16 dot products (AVX512_BF16, AMX-BF16 or Arm BF16)"
    if not kernels.library.load_dnnl():
        return "MindSpore's oneDNN (mindspore/lib/libdnnl.so) was not found"
    return None


def with_bf16_products(kernels):
    """`kernels` with products in bf16 (--dtype bf16 on the CPU, where bf16_products_refused says None): many
    rows against a bf16 weight through GemmBf16 with its epilogues, a batched decode step's products on the AMX
    tiles where the CPU has them, and the vision encoders' attention in bf16 on the tiles or with AVX512_BF16."""
    library = kernels.library
    epilogues = custom.bf16_epilogue_ops(library)
    amx, dpbf16 = library.amx_init(os.environ.get(AMX_ENV) != "0"), library.dpbf16_init(True)
    routes = kernels.routes + ("bf16_products",) + (("amx_decode", "amx_attention") if amx else ()) + \
        (("dpbf16_attention",) if dpbf16 else ())
    return dataclasses.replace(
        kernels, routes=routes, gemm_bf16=custom.bf16_gemm_op(library), gemm_bf16_bias=epilogues["bias"],
        gemm_bf16_gelu_erf=epilogues["gelu_erf"], gemm_bf16_gelu_tanh=epilogues["gelu_tanh"],
        gemm_bf16_residual=epilogues["residual"], amx_decode=custom.bf16_decode_ops(library) if amx else None,
        bf16_attention=custom.bf16_attention_ops(library) if amx or dpbf16 else None,
        bf16_attention_max_dim=(DPBF16_ATTENTION_MAX_DIM if dpbf16 else AMX_ATTENTION_MAX_DIM) if amx or dpbf16
        else None)


class ChosenAtBind:
    """A Cell holding an op made for its own fixed settings (a convolution's stride and padding: one Custom op per
    setting): `bind` calls its `choose(kernels)` after setting `kernels`."""

    def choose(self, kernels):
        """Pick this Cell's own ops from `kernels`; the Cell's class says which."""


def bind(cell, kernels):
    """Hand `kernels` to `cell` and every Cell inside it (`self.kernels`, read by their graphs), before a graph of
    them is built; a graph compiled earlier keeps the kernels it was built with."""
    for _, sub in cell.cells_and_names():
        sub.kernels = kernels
        if isinstance(sub, ChosenAtBind):
            sub.choose(kernels)
    return cell


@contextlib.contextmanager
def rebound(cell, kernels):
    """`cell` bound to other kernels inside the block (graphs built for export: MindIR, ONNX), to its own again
    after it. Graphs compiled before keep the kernels they were built with."""
    own = cell.kernels
    bind(cell, kernels)
    try:
        yield cell
    finally:
        bind(cell, own)
