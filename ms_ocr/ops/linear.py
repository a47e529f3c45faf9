"""Products with a weight stored [out, in]: MindSpore's MatMul(transpose_b), or on the CPU the native
matrix-vector kernel (ms_ocr/ops/native) for a few rows against a very large weight."""

import mindspore as ms
from mindspore import ops

from ms_ocr.ops.activation import gelu_erf, gelu_tanh
from ms_ocr.ops.custom import AMX_PRODUCTS

_mm = ops.MatMul(transpose_b=True)

# The native kernel serves x [M, K] with M <= NATIVE_MAX_ROWS (a decode step's rows) and weights of at least
# NATIVE_MIN_WEIGHT elements: measured in graph mode, it reads a head-sized weight (PaddleOCR-VL's 103,424 x 1,024)
# faster than MatMul, while for the decoder's 1-12 MB layer weights MatMul was as fast or faster: MindSpore's kernel
# threads and the OpenMP pool share the two cores, and
# only a long product amortises handing work over.
NATIVE_MAX_ROWS = 8
NATIVE_MIN_WEIGHT = 1 << 25
# A bf16 weight (kept bf16 on the CPU) has no MatMul of its own: the alternative to the native kernel is a widened
# fp32 copy written and read back per call. From this size on the native kernel serves it (DeepSeek-OCR-2's
# 896 x 1,280 experts and 1,280 x 1,280 attention projections: docs/journal/native-kernels.md, "AVX-512 and the MoE
# decoder in bf16"); below it
# (the tiny test models) the widened copy, bit-identical to the fp32 path's MatMul.
NATIVE_MIN_WEIGHT_BF16 = 1 << 20


# The exact path's products on the AMX tiles (GemmAmx, where routed) take x of at least this many rows against a bf16
# weight: each call packs its weight for the tiles, which only many rows repay (docs/journal/native-kernels.md,
# "GemmAmx").
AMX_MIN_ROWS = 64


def _amx_rows(kn, x, w):
    """Whether GemmAmx multiplies x by w: the exact path (fp32 x) against a bf16 weight, enough rows, where routed."""
    return (kn.amx_products is not None and w.dtype == ms.bfloat16 and x.dtype == ms.float32
            and x.shape[0] >= AMX_MIN_ROWS)


def _amx_op(kn, role):
    """GemmAmx for an epilogue role (None: the bare product)."""
    return kn.amx_products[[r for r, _ in AMX_PRODUCTS].index(role)]


def _bf16_rows(x, w):
    """Whether, with products in bf16 on, GemmBf16 multiplies x by w: a bf16 w against more fp32 rows than a decode
    step's (NATIVE_MAX_ROWS)."""
    return w.dtype == ms.bfloat16 and x.dtype == ms.float32 and x.shape[0] > NATIVE_MAX_ROWS


def matmul_t(kn, x, w):
    """x [M, K] times w [N, K] transposed: [M, N]. An fp32 x against a bf16 w (a bf16 checkpoint kept in bf16 on
    the CPU) is computed in fp32 on the weight widened exactly: by the native kernel where it serves (widening in
    registers, bit-identical to the widened weight's product), else by MatMul over a widened copy. With products
    in bf16 on (--dtype bf16, kn.gemm_bf16), more than NATIVE_MAX_ROWS rows against a bf16 w are
    rounded to bf16 and multiplied with fp32 accumulation (GemmBf16); a decode step's few rows stay as above (its
    products are bound by reading the weight, not by arithmetic), but on a CPU with AMX (kn.amx_decode),
    where the native kernel multiplies them rounded to bf16 on the tiles (several rows cost what one does). On the
    exact path with the AMX tiles routed (kn.amx_products), AMX_MIN_ROWS rows or more against a bf16 w take GemmAmx:
    the fp32 product on the tiles, w read as it is."""
    if kn.gemm_bf16 is not None and _bf16_rows(x, w):
        return kn.gemm_bf16(x, w)
    if _amx_rows(kn, x, w):
        return _amx_op(kn, None)(x, w)
    least = NATIVE_MIN_WEIGHT_BF16 if w.dtype == ms.bfloat16 else NATIVE_MIN_WEIGHT
    if (kn.matmul_t is not None and x.shape[0] <= NATIVE_MAX_ROWS
            and w.shape[0] * w.shape[1] >= least and x.dtype == ms.float32
            and w.dtype in (ms.float32, ms.bfloat16)):
        if kn.amx_decode is not None and w.dtype == ms.bfloat16:
            return kn.amx_decode[0](x, w)  # on the AMX tiles, x rounded to bf16
        return kn.matmul_t(x, w)
    if x.dtype == ms.float32 and w.dtype == ms.bfloat16:
        w = widen(kn, w, ms.float32)
    return _mm(x, w)


def linear_bias(kn, x, w, b, act=None, residual=None, act_role=None):
    """residual + act(x w^T + b) for x [M, K], w [N, K], b [N] (act, residual optional; residual [M, N]). With
    products in bf16 on and a product GemmBf16 serves (see matmul_t), one GemmBf16 variant adds the bias, applies
    the activation and adds the residual on each thread's slice of the output as it is computed (no separate
    passes over [M, N]: a PaddleOCR-VL layer's four bias adds, GELU and two residual adds); else the same sum
    through matmul_t and MindSpore's element-wise ops. act_role: `epilogue_role(act)`, decided outside the graph
    (graph mode cannot compare functions); an act without one is applied after the product."""
    role = ("residual" if act is None else None) if residual is not None else ("bias" if act is None else act_role)
    if role is not None and b.dtype == ms.float32 and (residual is None or residual.dtype == ms.float32):
        op = _epilogue(kn, role) if kn.gemm_bf16 is not None and _bf16_rows(x, w) else \
            _amx_op(kn, role) if _amx_rows(kn, x, w) else None
        if op is not None:
            return op(x, w, b) if residual is None else op(x, w, b, residual)
    y = matmul_t(kn, x, w)
    # BiasAdd: the same sums as `y + b` (bit for bit); MindSpore 2.10's CPU Add broadcasting b over [M, N] rows took
    # 19-21 ms eagerly for 8,400 x 256 against BiasAdd's 1.4-1.7 (5.0 against 1.9 ms in a graph)
    y = ops.bias_add(y, b) if not kn.portable and y.dtype == b.dtype == ms.float32 else y + b
    if act is not None:
        y = act(kn, y)
    return y if residual is None else residual + y


def linear_conv(kn, x, w, b=None):
    """x [M, C * kh * kw] times a stride == kernel convolution's weight w [N, C, kh, kw] flattened, transposed (+ b):
    [M, N]. With products in bf16 on (see matmul_t), more than NATIVE_MAX_ROWS rows against a bf16 w go to GemmBf16
    (through matmul_t / linear_bias) with w as it is: the kernel reads it as [N, C * kh * kw], and MindSpore's CPU
    Reshape has no bf16 kernel to flatten it; so do the exact path's products on the AMX tiles (GemmAmx). Otherwise w
    is widened where x is fp32 and flattened first."""
    if not (kn.gemm_bf16 is not None and _bf16_rows(x, w) or _amx_rows(kn, x, w)):
        if x.dtype == ms.float32:
            w = widen(kn, w, ms.float32)
        w = w.reshape(w.shape[0], -1)
    return matmul_t(kn, x, w) if b is None else linear_bias(kn, x, w, b)


def epilogue_role(act):
    """The name `linear_bias` takes as act_role for activation function `act`: "gelu_erf" / "gelu_tanh" for the
    GELUs GemmBf16 applies itself, else None."""
    return {gelu_erf: "gelu_erf", gelu_tanh: "gelu_tanh"}.get(act)


def _epilogue(kn, role):
    """The GemmBf16 variant of an epilogue role (linear_bias)."""
    if role == "bias":
        return kn.gemm_bf16_bias
    if role == "gelu_erf":
        return kn.gemm_bf16_gelu_erf
    if role == "gelu_tanh":
        return kn.gemm_bf16_gelu_tanh
    return kn.gemm_bf16_residual


def matmul_t_q8(kn, x, q, scale):
    """x [M, K] times an int8 weight q [N, K] with scales per row [N] or per group of columns [N, K / G]
    (--quantize int8[-gG]), transposed: [M, N] = x (q * scale)^T. A decode step's few rows: the native MatMulTQ8
    reading q as it is; more rows: against the weight dequantised to fp32."""
    if kn.q8 is not None and x.shape[0] <= NATIVE_MAX_ROWS and x.dtype == ms.float32:
        return kn.q8[0](x, q, scale)
    return matmul_t(kn, x, dequant_q8(kn, q, scale))


def dequant_q8(kn, q, scale):
    """An int8 weight [N, K] with scales per row [N] or per group of columns [N, K / G] as fp32: q * scale (the
    native DequantQ8 on the CPU); with products in bf16 on (kn.gemm_bf16), rounded to bf16 for them."""
    if kn.q8 is not None:
        return kn.q8[2 if kn.gemm_bf16 is not None else 1](q, scale)
    return _scaled(q.astype(ms.float32), scale)


def _scaled(w, scale):
    """w [..., K] times its scales [...] (one per row) or [..., K / G] (one per group of G columns)."""
    if len(scale.shape) == len(w.shape) - 1:
        return w * scale[..., None]
    groups = scale.shape[-1]
    runs = w.reshape(w.shape[:-1] + (groups, w.shape[-1] // groups))
    return (runs * scale[..., None]).reshape(w.shape)


def keeps_bf16(kn, w):
    """Whether a graph that computes in fp32 passes bf16-resident weight `w` to its products as it is (a matrix,
    read by matmul_t: products in bf16 on, or the exact products on the AMX tiles routed) instead of widening it."""
    return (kn.gemm_bf16 is not None or kn.amx_products is not None) and w.dtype == ms.bfloat16 and len(w.shape) == 2


def embedding_rows(kn, table, ids):
    """table [V, H] rows at ids ([...] int) -> [..., H]. A bf16 table kept in bf16 on the CPU (fp32 compute) goes
    through the native GatherRows, widened to fp32 exactly; any other table through Gather."""
    if table.dtype == ms.bfloat16 and kn.gather_rows is not None:
        return kn.gather_rows(table, ids)
    return ops.gather(table, ids, 0)


def embedding_rows_q8(q, scale, ids):
    """Rows of an int8 table q [V, H] with scales per row [V] or per group of columns [V, H / G] (--quantize int8
    with a tied head) at ids ([...] int) -> [..., H] fp32: q[ids] * scale[ids], the dequantised rows (a prompt's
    ids are few next to the table)."""
    return _scaled(ops.gather(q, ids, 0).astype(ms.float32), ops.gather(scale, ids, 0))


def interp_rows(kn, table, idx, w):
    """sum_k w[:, k] * table[idx[:, k]]: table [P, C] rows resampled by K weighted taps per output row (idx, w
    [N, K]) -> [N, C] (a position table bilinearly resampled to a patch grid). On the CPU (fp32 taps) the native
    InterpRows writes only the output; elsewhere a gather, multiply and sum over [N, K, C]."""
    native = kn.interp_rows is not None and table.dtype in (ms.float32, ms.bfloat16)
    if native and idx.dtype == ms.int32 and w.dtype == ms.float32:
        return kn.interp_rows(table, idx, w)
    return (ops.gather(table, idx, 0) * w[..., None]).sum(1)


def expert_rows(kn, stack, ids, dtype):
    """stack [E, ...] at ids [n] -> [n, ...] in `dtype`: a bf16 stack kept in bf16 on the CPU (fp32 compute) through
    the native GatherRows, widened exactly as it is read (MindSpore's CPU Gather has no bfloat16 kernel); any other
    through Gather."""
    if stack.dtype == ms.bfloat16 and dtype == ms.float32 and kn.gather_rows is not None:
        return kn.gather_rows(stack, ids)
    return widen(kn, ops.gather(stack, ids, 0), dtype)


def widen(kn, w, dtype):
    """w in `dtype`: a bf16 weight widened to fp32 by the native WidenBf16 where the library is loaded (exact, as
    Cast; MindSpore's CPU Cast from bf16 is a scalar kernel), anything else by astype (a no-op when w is `dtype`)."""
    if w.dtype == ms.bfloat16 and dtype == ms.float32 and kn.widen is not None:
        return kn.widen(w)
    return w if w.dtype == dtype else w.astype(dtype)
