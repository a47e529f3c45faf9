"""MatMulTBf16 and DecodeLayerBf16 (ms_ocr/ops/native/arch/x86/amx.cc): --dtype bf16's decode-step products on Intel's
AMX tiles. What they are documented to compute, with the tiles on and two or more rows: a bf16 weight's product of
the step's activation rows rounded to bf16 (to nearest, ties to even), each dot product summed in fp32 — checked
against float64 NumPy over the rounded operands — a row's result the same bits whatever the other rows. One row,
and with the tiles off (MS_OCR_AMX=0, a CPU without AMX): MatMulT and DecodeLayer, bit for bit. On a CPU without
AMX-BF16 the tile checks skip (their fallback is still checked)."""

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

from ms_ocr.convert.loader import round_to_bf16
from ms_ocr.ops import custom
from tests.helpers.native import bf16_kernels, build_kernels, needs_compiler
from tests.ops.test_decode_layer import CASES, _Layer, make_case, reference
from tests.ops.test_gemm_bf16 import rne_bf16


@pytest.fixture(scope="module", params=["native", "x86-64-v3"])
def kernels(request):
    k = build_kernels(request.param)
    yield k
    k.amx_init(False)


def _tiles(kernels):
    if not kernels.amx_init(True):
        pytest.skip("this CPU (or kernel) gives no AMX-BF16 tiles")


def _matmul(kernels, x, w, on):
    mm, _ = custom.bf16_decode_ops(kernels)
    kernels.amx_init(on)
    return mm(Tensor(x), Tensor(w).astype(ms.bfloat16)).asnumpy()


@needs_compiler
@pytest.mark.parametrize("k,n", [(1024, 600), (96, 64), (80, 70)])  # outputs past whole blocks; k off the 32 grid
def test_matmul_t_bf16_rounds_rows_and_sums_in_fp32(kernels, pynative_cpu, k, n):
    _tiles(kernels)
    rng = np.random.default_rng(k + n)
    x = rng.standard_normal((8, k)).astype(np.float32)
    w = round_to_bf16(rng.standard_normal((n, k)) * 0.1)
    got = _matmul(kernels, x, w, True)
    want = rne_bf16(x).astype(np.float64) @ w.astype(np.float64).T
    assert got.shape == (8, n) and got.dtype == np.float32
    assert np.abs(got - want).max() <= 2e-6 * np.sqrt(k) * np.abs(want).max()
    exact = x.astype(np.float64) @ w.astype(np.float64).T  # the rows are rounded, not kept
    assert np.abs(got - exact).max() > 10 * np.abs(got - want).max()
    for m in (2, 3):  # each row the same bits whatever the rows beside it
        assert np.array_equal(_matmul(kernels, x[:m], w, True), got[:m])
    # one row: MatMulT's exact products (its step is not faster on the tiles)
    exact_one = custom.native_ops(kernels)[0](Tensor(x[:1]), Tensor(w).astype(ms.bfloat16)).asnumpy()
    assert np.array_equal(_matmul(kernels, x[:1], w, True), exact_one)


@needs_compiler
def test_matmul_t_bf16_with_tiles_off_is_matmul_t(kernels, pynative_cpu):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 256)).astype(np.float32)
    w = round_to_bf16(rng.standard_normal((300, 256)))
    exact = custom.native_ops(kernels)[0](Tensor(x), Tensor(w).astype(ms.bfloat16)).asnumpy()
    assert np.array_equal(_matmul(kernels, x, w, False), exact)


def _layer(kernels, case, on, rows=None):
    *tensors, weights = make_case(np.random.default_rng(11), *case)
    weights = [round_to_bf16(w) for w in weights]
    if rows is not None:  # the first `rows` sequences of the case
        tensors = [a[:rows] if a.shape[0] == case[0] else a for a in tensors]
    ops_by_qk_norm = custom.bf16_decode_ops(kernels)[1]
    kernels.amx_init(on)
    op = ops_by_qk_norm[1 if len(weights) == 11 else 0]
    outs = _Layer(len(weights), 1e-6, op)(*(Tensor(a) for a in tensors),
                                          *(Tensor(w).astype(ms.bfloat16) for w in weights))
    return [o.asnumpy() for o in outs], reference(*tensors, weights, 1e-6)


# PaddleOCR-VL's head_dim and GQA in miniature with widths on the tiles' grid, and a case off it (gemv fallback)
TILE_CASES = [(8, 64, 4, 2, 32, 96, 24, False, 1, [24, 20, 16, 12, 8, 4, 2, 1]),
              (3, 128, 8, 2, 16, 64, 9, True, 3, [9, 5, 1])] + [CASES[3]]


@needs_compiler
@pytest.mark.parametrize("case", TILE_CASES)
def test_decode_layer_bf16_on_tiles(kernels, graph_cpu, case):
    _tiles(kernels)
    outs, ref = _layer(kernels, case, True)
    exact, _ = _layer(kernels, case, False)
    for got, want, ex in zip(outs, ref, exact):
        # bf16-rounded activations: within bf16's resolution of the float64 layer, and not the exact kernel
        scale = max(1.0, np.abs(want).max())
        assert np.abs(got - want).max() <= 3e-2 * scale
        assert np.abs(ex - want).max() <= 2e-5 * scale
    assert any(not np.array_equal(o, e) for o, e in zip(outs, exact))
    two, _ = _layer(kernels, case, True, rows=2)  # the first two sequences alone: the same bits
    for got, pair in zip(outs, two):
        assert np.array_equal(got[:2], pair)
    one, _ = _layer(kernels, case, True, rows=1)  # one sequence: the exact kernel's bits
    one_exact, _ = _layer(kernels, case, False, rows=1)
    for a, b in zip(one, one_exact):
        assert np.array_equal(a, b)


@needs_compiler
def test_decode_layer_bf16_with_tiles_off_is_decode_layer(kernels, graph_cpu):
    case = TILE_CASES[0]
    outs, _ = _layer(kernels, case, False)
    *tensors, weights = make_case(np.random.default_rng(11), *case)
    weights = [round_to_bf16(w) for w in weights]
    op = custom.native_ops(kernels)[1][0]
    exact = _Layer(len(weights), 1e-6, op)(*(Tensor(a) for a in tensors),
                                           *(Tensor(w).astype(ms.bfloat16) for w in weights))
    for got, want in zip(outs, exact):
        assert np.array_equal(got, want.asnumpy())


@needs_compiler
def test_bf16_products_route_the_decode_step_to_the_tiles(pynative_cpu, monkeypatch):
    """--dtype bf16 on a CPU with AMX: matmul_t's decode rows against a large bf16 weight take MatMulTBf16 (the
    rows rounded) and "amx_decode" is in the routes (the compile cache's key); MS_OCR_AMX=0 keeps them exact."""
    from ms_ocr import ops as K
    from ms_ocr.ops import native
    kernels = native.load()
    if kernels is None or not native.cpu_bf16_dot() or not kernels.load_dnnl() or not kernels.amx_init(True):
        pytest.skip("no AMX-BF16 tiles (or no bf16 products) here")
    rng = np.random.default_rng(4)
    w = round_to_bf16(rng.standard_normal((1024, 1024)) * 0.1)  # past NATIVE_MIN_WEIGHT_BF16: the native kernel
    x = rng.standard_normal((4, 1024)).astype(np.float32)  # a batched step's rows
    want = rne_bf16(x).astype(np.float64) @ w.astype(np.float64).T
    for on in (True, False):
        kn = bf16_kernels(monkeypatch, amx=on)
        assert (kn.amx_decode is not None) is on and ("amx_decode" in kn.routes) is on
        got = K.matmul_t(kn, Tensor(x), Tensor(w).astype(ms.bfloat16)).asnumpy()
        err = np.abs(got - want).max()
        assert bool(err <= 2e-6 * np.sqrt(1024) * np.abs(want).max()) is on
