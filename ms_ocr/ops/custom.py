"""The Custom ops over a native kernel library (ms_ocr/ops/native): each made once per library, since a graph keys
its compiled code on the op objects it holds. ops/kernels.py `choose` decides which of them a process routes."""

import functools

import mindspore as ms
from mindspore import ops


def _first(*args):
    return args[0]


def _custom(library, name, out_shape, out_dtype=_first):
    return ops.Custom(library.func(name), out_shape=out_shape, out_dtype=out_dtype, func_type="aot")


def _decode_layer_out_shape(*shapes):
    # x [B, 1, H]; this token's k and v [B, Hkv, 1, D] (k_cache, input 4, is [B, Hkv, T, D])
    b, hkv, _, d = shapes[4]
    return list(shapes[0]), [b, hkv, 1, d], [b, hkv, 1, d]


def _vit_heads_shape(yq, yk, yv, qb, kb, vb, cos, sin):
    # [N, H * D] -> [1, H, N, D] each, D the rope tables' last axis
    d = cos[-1]
    return ([1, yq[1] // d, yq[0], d],) * 3


def _rows_shape(q, k, v, s):
    return [q[0], q[2], q[1] * q[3]]


@functools.cache
def native_ops(library):
    """The Custom ops the route table chooses among (kernels.KERNELS order): (MatMulT, (DecodeLayer without, with
    q/k norms), VisionAttention, (GeluTanh, GeluErf), CausalAttention, MoeExperts, ViTHeads, LayerNormRows,
    RmsNormRows, (GemmAmx and its epilogues: amx_product_ops))."""
    return (
        _custom(library, "MatMulT", lambda x, w: [x[0], w[0]]),
        tuple(_custom(library, "DecodeLayer", _decode_layer_out_shape, lambda *dtypes: (dtypes[0],) * 3)
              for _ in range(2)),
        _custom(library, "VisionAttention", _first),
        tuple(_custom(library, name, _first) for name in ("GeluTanh", "GeluErf")),
        _custom(library, "CausalAttention", _first),
        _custom(library, "MoeExperts", lambda h, *rest: list(h)),
        _custom(library, "ViTHeads", _vit_heads_shape, lambda *dtypes: (dtypes[0],) * 3),
        _custom(library, "LayerNormRows", _first),
        _custom(library, "RmsNormRows", _first),
        amx_product_ops(library))


@functools.cache
def attention_rows_op(library):
    """VisionAttentionRows: q [B, H, S, D], k, v, scale [1] -> [B, S, H * D]."""
    return _custom(library, "VisionAttentionRows", _rows_shape, lambda *dtypes: dtypes[0])


@functools.cache
def bf16_ops(library):
    """(GatherRows, WidenBf16, InterpRows): rows of a bf16 or fp32 table widened to fp32, a bf16 tensor widened to
    fp32, and rows of a table resampled by weighted taps."""
    return (
        _custom(library, "GatherRows", lambda table, ids: list(ids) + list(table[1:]), lambda table, ids: ms.float32),
        _custom(library, "WidenBf16", _first, lambda x: ms.float32),
        _custom(library, "InterpRows", lambda table, idx, w: [idx[0], table[1]], lambda *dtypes: ms.float32))


@functools.cache
def int8_ops(library):
    """(MatMulTQ8, DequantQ8, DequantQ8 to bf16): a few rows against an int8 weight with per-row scales
    ((x q^T) * scale), and an int8 weight dequantised to fp32 (q * scale) or to bf16."""
    return (
        _custom(library, "MatMulTQ8", lambda x, q, s: [x[0], q[0]], lambda *dtypes: ms.float32),
        _custom(library, "DequantQ8", lambda q, s: list(q), lambda *dtypes: ms.float32),
        _custom(library, "DequantQ8", lambda q, s: list(q), lambda *dtypes: ms.bfloat16))


@functools.cache
def bf16_gemm_op(library):
    """GemmBf16: x [M, K], bf16 w [N, K] -> fp32 [M, N]."""
    return _custom(library, "GemmBf16", lambda x, w: [x[0], w[0]], lambda x, w: ms.float32)


EPILOGUES = {"bias": "GemmBf16Bias", "gelu_erf": "GemmBf16BiasGeluErf", "gelu_tanh": "GemmBf16BiasGeluTanh",
             "residual": "GemmBf16BiasResidual"}


@functools.cache
def bf16_epilogue_ops(library):
    """GemmBf16 with its epilogue, by role (EPILOGUES): x [M, K], bf16 w [N, K], b [N] (, res [M, N]) -> fp32
    [M, N]: the bias, then GELU, or the bias then a residual, on each thread's slice as it is computed."""
    return {role: _custom(library, name, lambda x, w, *rest: [x[0], w[0]], lambda *dtypes: ms.float32)
            for role, name in EPILOGUES.items()}


# GemmAmx alone (role None) and with the epilogues of EPILOGUES' roles, in this order
AMX_PRODUCTS = ((None, "GemmAmx"), ("bias", "GemmAmxBias"), ("gelu_erf", "GemmAmxBiasGeluErf"),
                ("gelu_tanh", "GemmAmxBiasGeluTanh"), ("residual", "GemmAmxBiasResidual"))


@functools.cache
def amx_product_ops(library):
    """GemmAmx alone and with its epilogues, in AMX_PRODUCTS' order: GemmBf16's signatures for an fp32 x, the exact
    fp32 product on the AMX tiles."""
    return tuple(_custom(library, name, lambda x, w, *rest: [x[0], w[0]], lambda *dtypes: ms.float32)
                 for _, name in AMX_PRODUCTS)


@functools.cache
def bf16_decode_ops(library):
    """(MatMulTBf16, (DecodeLayerBf16 without, with q/k norms)): MatMulT's and DecodeLayer's signatures, the
    products on the AMX tiles with the rows rounded to bf16."""
    return (_custom(library, "MatMulTBf16", lambda x, w: [x[0], w[0]]),
            tuple(_custom(library, "DecodeLayerBf16", _decode_layer_out_shape, lambda *dtypes: (dtypes[0],) * 3)
                  for _ in range(2)))


@functools.cache
def bf16_attention_ops(library):
    """(VisionAttentionBf16, VisionAttentionBf16Rows): VisionAttention's and VisionAttentionRows' signatures (q
    [B, H, S, D], k, v, scale [1] -> [B, H, S, D] / [B, S, H * D])."""
    return (_custom(library, "VisionAttentionBf16", _first),
            _custom(library, "VisionAttentionBf16Rows", _rows_shape))


@functools.cache
def conv_affine_op(library, stride, padding, dilation):
    """Conv2dAffine for one (stride, padding, dilation): x [B, C, H, W], w [O, C / groups, kh, kw], scale [O], shift
    [O], geometry int32 [6] [, res] -> [B, O, OH, OW]."""
    def shape(x, w, *rest):
        return [x[0], w[0], (x[2] + 2 * padding - dilation * (w[2] - 1) - 1) // stride + 1,
                (x[3] + 2 * padding - dilation * (w[3] - 1) - 1) // stride + 1]

    return _custom(library, "Conv2dAffine", shape)


@functools.cache
def pad_max_pool_op(library):
    """PadMaxPool2: x [B, C, H, W] -> [B, C, H, W], the max over each 2x2 window of x padded with a zero row and
    column on the bottom and right (HGNetV2's stem)."""
    return _custom(library, "PadMaxPool2", _first)


@functools.cache
def deformable_op(library):
    """DeformableSample: value [B, S, C], loc [B, Q, heads, L, P, 2], weight [B, Q, heads, L, P], shapes int32
    [L, 2] -> [B, Q, C]."""
    return _custom(library, "DeformableSample", lambda v, loc, w, hw: [v[0], loc[1], v[2]])
