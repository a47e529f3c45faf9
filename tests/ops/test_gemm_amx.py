"""GemmAmx (ms_ocr/ops/native/arch/x86/amx.cc, gemm_bf16.cc): the exact path's products of many fp32 rows against a
bf16 weight on Intel's AMX tiles. What it is documented to compute: the fp32 product x w^T, x cut into three bf16
parts whose sum is x exactly, each part's products exact in fp32 and summed in fp32 — so an identity weight gives x
back bit for bit, the error against float64 is an fp32 GEMM's (not the ~1e-3 of x rounded to bf16), non-finite
values propagate as in fp32, and neither the thread count nor the slicing changes a bit. Then its epilogues and its
routing (ops.linear: matmul_t, linear_bias, linear_conv; MS_OCR_AMX=0, --dtype bf16, few rows, fp32 weights). On a
CPU without AMX-BF16 the kernel checks skip, and the routing check asserts that nothing is routed. The kernel checks
run on the native, x86-64-v4 and x86-64-v3 builds."""

import math

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

from ms_ocr import ops as K
from ms_ocr.convert.loader import round_to_bf16
from ms_ocr.ops import custom, native
from ms_ocr.ops import kernels as routes
from tests.helpers.native import build_kernels, needs_compiler
from tests.ops.test_gemm_bf16 import at_threads, rne_bf16


@pytest.fixture(scope="module", params=["native", "x86-64-v4", "x86-64-v3"])
def kernels(request):
    """Every x86 build this machine runs: the kernel's functions carry their own target attributes, so each build
    has it (only the avx512 level routes it: ops/kernels.py)."""
    k = build_kernels(request.param)
    if not k.amx_products:
        pytest.skip("this CPU (or kernel) gives no AMX-BF16 tiles")
    return k


def _op(kernels, role=None):
    return custom.amx_product_ops(kernels)[[r for r, _ in custom.AMX_PRODUCTS].index(role)]


def _gemm(kernels, x, w, *rest, role=None):
    before = kernels.gemm_amx_calls
    got = _op(kernels, role)(Tensor(x), Tensor(w).astype(ms.bfloat16), *map(Tensor, rest)).asnumpy()
    assert kernels.gemm_amx_calls == before + 1
    return got


def _fp32_error_bound(x, w):
    """An fp32 GEMM's error bound per output: k * 2^-24 * sum |x| |w| (any summation order)."""
    k = x.shape[1]
    return k * 2.0 ** -24 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T)


@needs_compiler
@pytest.mark.parametrize("m,k,n", [(300, 200, 70), (64, 1024, 600), (130, 1152, 131), (1, 33, 5), (1000, 96, 48),
                                   (77, 4096, 300)])  # rows and outputs off the 32 grid, k off it; by rows (m > n)
def test_the_fp32_product_not_a_rounded_one(m, k, n, kernels, pynative_cpu):
    rng = np.random.default_rng(m + k + n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = round_to_bf16(rng.standard_normal((n, k)) * 0.1)
    got = _gemm(kernels, x, w)
    assert got.shape == (m, n) and got.dtype == np.float32
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    err = np.abs(got - exact)
    assert (err <= _fp32_error_bound(x, w)).all()
    # as close as NumPy's own fp32 product, and far closer than the product of x rounded to bf16
    numpy_fp32 = np.abs((x @ w.T) - exact).max()
    assert err.max() <= 4 * numpy_fp32 + 1e-30
    rounded = np.abs(rne_bf16(x).astype(np.float64) @ w.astype(np.float64).T - exact).max()
    assert err.max() * 100 < rounded


@needs_compiler
def test_an_identity_weight_gives_every_bit_of_x_back(kernels, pynative_cpu):
    """All 24 significand bits of x survive: x times the identity (and times powers of two) is exact."""
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 1 << 23, (96, 64), dtype=np.uint32) | np.uint32(0x3F800000)  # 1 + every mantissa
    x = bits.view(np.float32) * np.float32(2.0) ** rng.integers(-60, 60, (96, 64)).astype(np.float32)
    x[::3] *= -1
    eye = np.eye(64, dtype=np.float32)
    assert np.array_equal(_gemm(kernels, x, eye), x)
    assert np.array_equal(_gemm(kernels, x, eye * np.float32(0.25)), x * np.float32(0.25))


@needs_compiler
def test_non_finite_values_propagate_as_in_fp32(kernels, pynative_cpu):
    x = np.ones((64, 32), np.float32)
    x[1, 3] = np.inf
    x[2, 3] = -np.inf
    x[3, 5] = np.nan
    x[4, 0] = np.float32(3e38)  # large but finite: its parts are finite too
    w = np.zeros((16, 32), np.float32)
    w[:, 3] = 1.0
    w[:8, 5] = 0.5
    w[:, 0] = 1.0
    got = _gemm(kernels, x, w)
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.array_equal(np.isposinf(got), np.isposinf(want)) and np.isposinf(got[1]).all()
    assert np.array_equal(np.isneginf(got), np.isneginf(want)) and np.isneginf(got[2]).all()
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got[3]).all()  # NaN x 0 is NaN
    assert np.isfinite(got[4]).all()
    finite = np.isfinite(want)
    assert np.abs(got[finite] - want[finite]).max() <= 1e-6 * np.abs(want[finite]).max()


@needs_compiler
def test_threads_and_slicing_change_no_bit(kernels, pynative_cpu):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((257, 320)).astype(np.float32)
    w = round_to_bf16(rng.standard_normal((190, 320)))
    out = at_threads(kernels, lambda: (_gemm(kernels, x, w), _gemm(kernels, x[:100], w)))  # by rows, by outputs
    assert all(np.array_equal(a, b) for a, b in zip(out[1], out[2]))
    assert np.array_equal(out[2][0][:100], out[2][1])  # a row's result does not depend on the rows beside it


def _gelu(v, tanh):
    if tanh:
        return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    return 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))


@needs_compiler
@pytest.mark.parametrize("role", ["bias", "gelu_erf", "gelu_tanh", "residual"])
def test_epilogues(role, kernels, pynative_cpu):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((150, 96)).astype(np.float32)
    w = round_to_bf16(rng.standard_normal((200, 96)) * 0.1)
    b = rng.standard_normal(200).astype(np.float32)
    res = rng.standard_normal((150, 200)).astype(np.float32)
    want = x.astype(np.float64) @ w.astype(np.float64).T + b
    rest = (b, res) if role == "residual" else (b,)
    if role == "residual":
        want = res + want
    elif role != "bias":
        want = _gelu(want, role == "gelu_tanh")
    got = _gemm(kernels, x, w, *rest, role=role)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    # the epilogue runs on the product GemmAmx computes alone: the same bits for the bias and the residual sums
    bare = _gemm(kernels, x, w)
    if role == "bias":
        assert np.array_equal(got, bare + b)
    if role == "residual":
        assert np.array_equal(got, res + (bare + b))


@needs_compiler
def test_routing(pynative_cpu, monkeypatch):
    """From AMX_MIN_ROWS rows, an fp32 x against a bf16 weight takes GemmAmx on a CPU with the tiles (matmul_t,
    linear_bias with its epilogue, linear_conv with a 4-D weight); fewer rows, an fp32 weight, MS_OCR_AMX=0 and
    --dtype bf16 (GemmBf16) do not. Without the tiles nothing is routed."""
    library = native.load()
    kn = routes.choose("CPU")
    if library is None or not library.amx_products or "amx_products" not in routes.native_routes(library.isa_level):
        assert kn.amx_products is None and "amx_products" not in kn.routes
        return
    assert kn.amx_products is not None and "amx_products" in kn.routes
    rng = np.random.default_rng(2)
    rows = K.linear.AMX_MIN_ROWS
    w = round_to_bf16(rng.standard_normal((96, 48)) * 0.1)
    wb = Tensor(w).astype(ms.bfloat16)
    b = Tensor(rng.standard_normal(96).astype(np.float32))
    many, few = (Tensor(rng.standard_normal((r, 48)).astype(np.float32)) for r in (rows, rows - 1))
    want = many.asnumpy().astype(np.float64) @ w.astype(np.float64).T
    before = library.gemm_amx_calls
    got = K.matmul_t(kn, many, wb).asnumpy()
    assert library.gemm_amx_calls == before + 1
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()
    got = K.linear_bias(kn, many, wb, b, act=K.gelu_erf, act_role="gelu_erf").asnumpy()
    assert library.gemm_amx_calls == before + 2
    assert np.abs(got - _gelu(want + b.asnumpy(), False)).max() <= 1e-5 * np.abs(want).max()
    conv = Tensor(w.reshape(96, 3, 4, 4)).astype(ms.bfloat16)
    assert np.array_equal(K.linear_conv(kn, many, conv).asnumpy(), K.matmul_t(kn, many, wb).asnumpy())
    assert library.gemm_amx_calls == before + 4
    K.matmul_t(kn, few, wb).asnumpy()  # (read back: PyNative runs ops asynchronously, the counters are read now)
    K.matmul_t(kn, many, Tensor(w)).asnumpy()
    assert library.gemm_amx_calls == before + 4
    monkeypatch.setenv(routes.AMX_ENV, "0")
    off = routes.choose("CPU")
    assert off.amx_products is None and "amx_products" not in off.routes
    K.matmul_t(off, many, wb).asnumpy()
    monkeypatch.delenv(routes.AMX_ENV)
    if routes.bf16_products_refused("CPU", kn) is None:
        K.matmul_t(routes.with_bf16_products(kn), many, wb).asnumpy()  # GemmBf16 takes it
    assert library.gemm_amx_calls == before + 4
