"""The native decode kernels reading bf16 weights (a bf16 checkpoint kept in bf16 on the CPU): MatMulT and
DecodeLayer as MindSpore Custom ops with bfloat16 weight tensors give bit for bit what they give on the same
weights widened to fp32, and match float64 NumPy, at every SIMD level this machine builds (the aarch64 NEON
build: tests/ops/test_native_isa.py)."""

import numpy as np
import mindspore as ms
from mindspore import Tensor

from ms_ocr.convert.loader import round_to_bf16
from ms_ocr.ops import custom, linear
from tests.helpers.native import needs_compiler, op_cell
from tests.ops import test_decode_layer


def _bits(t):
    return t.asnumpy().view(np.uint32)


MATMUL_CASES = [(1, 1030, 1000), (4, 37, 37), (8, 257, 1152), (5, 9, 3)]


@needs_compiler
def test_matmul_t_bf16_weights_at_every_isa_level(graph_cpu, isa_kernels):
    op = custom.native_ops(isa_kernels)[0]
    rng = np.random.default_rng(3)
    before = isa_kernels.matmul_t_calls
    for m, n, k in MATMUL_CASES:
        x, w = rng.standard_normal((m, k)).astype(np.float32), round_to_bf16(rng.standard_normal((n, k)))
        w_bf16 = Tensor(w).astype(ms.bfloat16)
        assert w_bf16.dtype == ms.bfloat16
        got, want = op_cell(op)(Tensor(x), w_bf16), op_cell(op)(Tensor(x), Tensor(w))
        assert got.dtype == ms.float32
        assert np.array_equal(_bits(got), _bits(want))
        ref = x.astype(np.float64) @ w.astype(np.float64).T
        assert np.abs(got.asnumpy() - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
    assert isa_kernels.matmul_t_calls == before + 2 * len(MATMUL_CASES)


@needs_compiler
def test_decode_layer_bf16_weights_at_every_isa_level(graph_cpu, isa_kernels):
    ops_by_qk_norm = custom.native_ops(isa_kernels)[1]
    before = isa_kernels.decode_layer_calls
    for i, case in enumerate(test_decode_layer.CASES):
        *tensors, weights = test_decode_layer.make_case(np.random.default_rng(20 + i), *case)
        weights = [round_to_bf16(w) for w in weights]
        op = ops_by_qk_norm[1 if len(weights) == 11 else 0]
        eps = Tensor(np.array([1e-5], np.float32))
        args = [Tensor(a) for a in tensors]
        got = op_cell(op)(*args, *(Tensor(w).astype(ms.bfloat16) for w in weights), eps)
        want = op_cell(op)(*args, *(Tensor(w) for w in weights), eps)
        ref = test_decode_layer.reference(*tensors, weights, 1e-5)
        for g, w_, r in zip(got, want, ref):
            assert g.dtype == ms.float32 and np.array_equal(_bits(g), _bits(w_))
            assert np.abs(g.asnumpy() - r).max() <= 2e-5 * max(1.0, np.abs(r).max())
    assert isa_kernels.decode_layer_calls == before + 2 * len(test_decode_layer.CASES)


@needs_compiler
def test_matmul_t_routes_bf16_weights(graph_cpu, all_routes):
    """ops.matmul_t sends an fp32 x against a large bf16 weight to the kernel, and a bf16 weight the kernel does
    not serve (small) to MatMul over its widened copy: both equal the fp32 weight's product."""
    kernels = all_routes.library
    rng = np.random.default_rng(5)
    n = linear.NATIVE_MIN_WEIGHT // 256
    x, w = rng.standard_normal((2, 256)).astype(np.float32), round_to_bf16(rng.standard_normal((n, 256)) * 0.1)
    f = op_cell(linear.matmul_t, all_routes)
    before = kernels.matmul_t_calls
    got = f(Tensor(x), Tensor(w).astype(ms.bfloat16))
    assert kernels.matmul_t_calls == before + 1
    assert np.array_equal(_bits(got), _bits(f(Tensor(x), Tensor(w))))
    small = Tensor(w[:64]).astype(ms.bfloat16)
    out = f(Tensor(x), small)
    assert kernels.matmul_t_calls == before + 2  # the fp32 call above only
    ref = x.astype(np.float64) @ w[:64].astype(np.float64).T
    assert out.dtype == ms.float32 and np.abs(out.asnumpy() - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
    # from NATIVE_MIN_WEIGHT_BF16 on (below the fp32 threshold) a bf16 weight goes to the kernel, an fp32 one of
    # the same size to MatMul: the same products in another summation order, within 1e-6 of max|y|
    mid = linear.NATIVE_MIN_WEIGHT_BF16 // 256
    assert mid * 256 < linear.NATIVE_MIN_WEIGHT
    got = f(Tensor(x), Tensor(w[:mid]).astype(ms.bfloat16))
    assert kernels.matmul_t_calls == before + 3
    want = f(Tensor(x), Tensor(w[:mid])).asnumpy()
    assert kernels.matmul_t_calls == before + 3
    assert np.abs(got.asnumpy() - want).max() <= 1e-6 * np.abs(want).max()
    below = f(Tensor(x), Tensor(w[:mid - 1]).astype(ms.bfloat16))
    assert kernels.matmul_t_calls == before + 3  # below it: MatMul over the widened copy, as fp32 computes
    assert np.array_equal(_bits(below), _bits(f(Tensor(x), Tensor(w[:mid - 1]))))


@needs_compiler
def test_gather_rows_and_widen_at_every_isa_level(graph_cpu, isa_kernels):
    """GatherRows (the embedding lookup of a bf16 table) and WidenBf16 give the bf16 values exactly, in fp32."""
    gather, widen, _ = custom.bf16_ops(isa_kernels)
    rng = np.random.default_rng(9)
    table = round_to_bf16(rng.standard_normal((50, 37)))
    ids = np.array([[3, 0, 49], [7, 7, 60]], np.int32)  # 60: out of range, a zero row
    want = np.where((ids < 50)[..., None], table[np.minimum(ids, 49)], 0.0).astype(np.float32)
    for id_dtype in (np.int32, np.int64):
        got = op_cell(gather)(Tensor(table).astype(ms.bfloat16), Tensor(ids.astype(id_dtype)))
        assert got.dtype == ms.float32 and np.array_equal(_bits(got), want.view(np.uint32))
    stack = round_to_bf16(rng.standard_normal((6, 5, 7)))  # an expert stack [E, I, H]: a row is [I, H]
    picked = np.array([4, 0, 4, 9], np.int32)
    want = np.where((picked < 6)[:, None, None], stack[np.minimum(picked, 5)], 0.0).astype(np.float32)
    got = op_cell(gather)(Tensor(stack).astype(ms.bfloat16), Tensor(picked))
    assert got.shape == (4, 5, 7) and np.array_equal(_bits(got), want.view(np.uint32))
    x = round_to_bf16(rng.standard_normal((3, 70001)))  # several chunks of the parallel loop and a tail
    got = op_cell(widen)(Tensor(x).astype(ms.bfloat16))
    assert got.dtype == ms.float32 and np.array_equal(_bits(got), x.view(np.uint32))


def _widen_fp32(kn, w):
    return linear.widen(kn, w, ms.float32)


@needs_compiler
def test_widen_routes(graph_cpu):
    """ops.widen: a bf16 weight through WidenBf16 where the library is loaded, else through Cast; both exact;
    fp32 passes unchanged."""
    x = round_to_bf16(np.random.default_rng(4).standard_normal((64, 33)))
    xb = Tensor(x).astype(ms.bfloat16)
    kn = graph_cpu
    assert kn.widen is not None
    assert np.array_equal(_bits(op_cell(_widen_fp32, kn)(xb)), x.view(np.uint32))
    assert kn.without_native().widen is None
    assert np.array_equal(_bits(op_cell(_widen_fp32, kn.without_native())(xb)), x.view(np.uint32))
    xf = Tensor(x)
    assert np.array_equal(_bits(op_cell(_widen_fp32, kn)(xf)), x.view(np.uint32))


@needs_compiler
def test_matmul_t_rows_equal_one_row_products_at_every_isa_level(graph_cpu, isa_kernels):
    """A product of M activation rows (a batch engine's decode step) gives each row bit for bit what that row alone
    gives, for every M the kernel takes (each level sizes its blocks per M; more than 6 rows run as two passes),
    with fp32 and bf16 weights, widths with and without a vector tail, more weight rows than one thread's range:
    a sequence's tokens do not depend on how many others decode beside it."""
    op = custom.native_ops(isa_kernels)[0]
    rng = np.random.default_rng(11)
    # PyNative: the op runs as it is, without a graph compiled for each of the 48 shapes (~2 min per level)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        for n, k in [(1030, 1024), (389, 1000), (7, 37)]:
            x8, w = rng.standard_normal((8, k)).astype(np.float32), round_to_bf16(rng.standard_normal((n, k)))
            for weight in (Tensor(w), Tensor(w).astype(ms.bfloat16)):
                alone = np.concatenate([_bits(op(Tensor(x8[i:i + 1]), weight)) for i in range(8)])
                want = x8.astype(np.float64) @ w.astype(np.float64).T
                assert np.abs(alone.view(np.float32) - want).max() <= 1e-5 * np.abs(want).max()
                for m in range(2, 9):
                    got = _bits(op(Tensor(x8[:m]), weight))
                    assert np.array_equal(got, alone[:m]), (isa_kernels.isa_level, n, k, m, weight.dtype)
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
