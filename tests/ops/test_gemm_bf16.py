"""GemmBf16 (ms_ocr/ops/native/gemm_bf16.cc): --dtype bf16's products on a CPU with bf16 dot products, through the
oneDNN MindSpore's wheel ships, or on the AMX tiles where they are on (ms_ocr_amx_init; the kernel checks run both
ways, the tiles' skipping on a CPU without them). What it is documented to compute: the activations rounded to bf16
(to nearest, ties to even), times bf16 weights, each dot product summed in fp32; checked against float64 NumPy over
the rounded operands, on shapes split by rows and by columns, with 1 and 2 threads. Then its routing
(ops.linear.matmul_t) and the notice a CPU without bf16 dot products gives."""

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

from ms_ocr import ops as K
from ms_ocr import plan
from ms_ocr.convert.loader import round_to_bf16
from ms_ocr.ops import custom, native
from ms_ocr.ops import kernels as routes
from tests.helpers.native import build_kernels, needs_compiler

needs_dnnl = pytest.mark.skipif(native.dnnl_path() is None, reason="MindSpore's wheel has no libdnnl here")


def rne_bf16(x):
    """fp32 -> bf16 to nearest, ties to even (NumPy, independent of the kernel's own rounding)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


@pytest.fixture(scope="module", params=["dnnl", "tiles"])
def kernels(request):
    k = build_kernels("native")
    assert k.load_dnnl()
    if k.amx_init(request.param == "tiles") != (request.param == "tiles"):
        pytest.skip("this CPU (or kernel) gives no AMX-BF16 tiles")
    yield k
    k.amx_init(False)


def _gemm(kernels, x, w):
    return custom.bf16_gemm_op(kernels)(Tensor(x), Tensor(w).astype(ms.bfloat16)).asnumpy()


def at_threads(kernels, run):
    """{threads: run()} at 1 and 2 of the kernels' threads (2 again after)."""
    out = {}
    for threads in (1, 2):
        kernels.set_threads(threads)
        out[threads] = run()
    kernels.set_threads(2)
    return out


@needs_compiler
@needs_dnnl
@pytest.mark.parametrize("m,k,n", [(300, 200, 70), (9, 64, 700), (130, 1152, 131), (1, 33, 5)])
def test_products_of_rounded_activations_summed_in_fp32(m, k, n, kernels, pynative_cpu):
    rng = np.random.default_rng(m + n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = round_to_bf16(rng.standard_normal((n, k)) * 0.1)
    want = rne_bf16(x).astype(np.float64) @ w.astype(np.float64).T
    before = kernels.gemm_bf16_calls
    got = _gemm(kernels, x, w)
    assert kernels.gemm_bf16_calls == before + 1
    assert got.shape == (m, n) and got.dtype == np.float32
    assert np.abs(got - want).max() <= 2e-6 * np.sqrt(k) * np.abs(want).max()
    # the activations are rounded, not kept: fp32 products of the unrounded x differ by far more
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.abs(got - exact).max() > 10 * np.abs(got - want).max()
    # bf16 activations given as such are the same product
    bf = custom.bf16_gemm_op(kernels)(Tensor(rne_bf16(x)).astype(ms.bfloat16), Tensor(w).astype(ms.bfloat16))
    assert np.array_equal(bf.asnumpy(), got)


@needs_compiler
@needs_dnnl
def test_rounding_is_to_nearest_even(kernels, pynative_cpu):
    """Halfway cases round to the even bf16 neighbour (read back through an identity weight)."""
    one = np.float32(1.0).view(np.uint32)
    bits = np.array([one + 0x8000, one + 0x18000, one + 0x7FFF, one + 0x8001], np.uint32)  # 2 ties, below, above
    x = np.tile(bits.view(np.float32), 16).reshape(4, 16)
    got = _gemm(kernels, x, np.eye(16, dtype=np.float32))
    assert np.array_equal(got, rne_bf16(x))
    assert np.array_equal(got[0, :4].view(np.uint32), np.array([one, one + 0x20000, one, one + 0x10000], np.uint32))


@needs_compiler
@needs_dnnl
def test_thread_count_does_not_change_the_result(kernels, pynative_cpu):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((257, 320)).astype(np.float32)
    w = round_to_bf16(rng.standard_normal((190, 320)))
    out = at_threads(kernels, lambda: (_gemm(kernels, x, w), _gemm(kernels, x[:40], w)))
    assert all(np.array_equal(a, b) for a, b in zip(out[1], out[2]))


@needs_compiler
@needs_dnnl
def test_matmul_t_routes_many_rows_against_bf16_weights(pynative_cpu, monkeypatch):
    """With products in bf16 on, more rows than a decode step's against a bf16 matrix take GemmBf16; a decode
    step's rows and fp32 weights do not, and the norm vectors are still widened (keeps_bf16)."""
    if not native.cpu_bf16_dot():
        monkeypatch.setattr(native, "cpu_bf16_dot", lambda: True)
    assert routes.bf16_products_refused("CPU", pynative_cpu) is None
    kn = routes.with_bf16_products(pynative_cpu)
    assert kn.gemm_bf16 is not None and "bf16_products" in kn.routes
    kernels = native.load()
    rng = np.random.default_rng(2)
    w = Tensor(round_to_bf16(rng.standard_normal((96, 64)))).astype(ms.bfloat16)
    many, few = (Tensor(rng.standard_normal((r, 64)).astype(np.float32)) for r in (K.linear.NATIVE_MAX_ROWS + 1, 4))
    before = kernels.gemm_bf16_calls
    got = K.matmul_t(kn, many, w).asnumpy()
    assert kernels.gemm_bf16_calls == before + 1
    want = rne_bf16(many.asnumpy()).astype(np.float64) @ w.astype(ms.float32).asnumpy().T
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    K.matmul_t(kn, few, w)
    K.matmul_t(kn, many, w.astype(ms.float32))
    assert kernels.gemm_bf16_calls == before + 1
    assert K.keeps_bf16(kn, w) and not K.keeps_bf16(kn, w[0]) and not K.keeps_bf16(kn, w.astype(ms.float32))


@needs_compiler
@needs_dnnl
@pytest.mark.parametrize("rows", [3, 40])
def test_linear_conv_reads_a_convolution_weight_as_its_flattened_matrix(rows, pynative_cpu, monkeypatch):
    """ops.linear.linear_conv, a stride == kernel convolution's product x w.reshape(N, -1)^T + b: on the exact path
    (fp32 w, and a bf16 w widened) and, with products in bf16 on, more rows than a decode step's against a bf16
    [N, C, kh, kw] w given to GemmBf16 as it is (the kernel reads it as [N, C * kh * kw])."""
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 3 * 4 * 4)).astype(np.float32)
    w = round_to_bf16(rng.standard_normal((72, 3, 4, 4)))
    b = rng.standard_normal(72).astype(np.float32)
    flat = w.reshape(72, -1).astype(np.float64)
    want = x.astype(np.float64) @ flat.T + b
    exact = pynative_cpu
    got = K.linear_conv(exact, Tensor(x), Tensor(w), Tensor(b)).asnumpy()
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    wb = Tensor(w).astype(ms.bfloat16)
    assert np.abs(K.linear_conv(exact, Tensor(x), wb).asnumpy() - (want - b)).max() <= 1e-5 * np.abs(want).max()
    if not native.cpu_bf16_dot():
        monkeypatch.setattr(native, "cpu_bf16_dot", lambda: True)
    assert routes.bf16_products_refused("CPU", exact) is None
    kn = routes.with_bf16_products(exact)
    kernels = native.load()
    before = kernels.gemm_bf16_calls
    got = K.linear_conv(kn, Tensor(x), wb, Tensor(b)).asnumpy()
    routed = rows > K.linear.NATIVE_MAX_ROWS
    assert kernels.gemm_bf16_calls == before + routed
    rounded = (rne_bf16(x).astype(np.float64) if routed else x.astype(np.float64)) @ flat.T + b
    assert np.abs(got - rounded).max() <= 1e-5 * np.abs(rounded).max()


def test_a_cpu_without_bf16_dot_products_keeps_fp32_and_says_so_once(monkeypatch, capsys):
    kn = routes.choose("CPU")
    if kn.library is None:
        pytest.skip("no native kernel library here")
    monkeypatch.setattr(native, "cpu_bf16_dot", lambda: False)
    monkeypatch.setattr(plan, "_NOTICES", set())
    assert plan.bf16_products("bf16", "CPU", kn) is None and plan.bf16_products("bf16", "CPU", kn) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["[ms_ocr] --dtype bf16: products stay fp32 on bf16-rounded weights (this CPU has no bf16 dot "
                   "products (AVX512_BF16, AMX-BF16 or Arm BF16))"]
    assert plan.bf16_products("auto", "CPU", kn) is None
    assert plan.bf16_products("bf16", "Ascend", routes.choose("Ascend")) is routes.choose("Ascend")


def test_cpu_bf16_dot_reads_the_flags(tmp_path, monkeypatch):
    import builtins
    real_open = builtins.open
    for flags, want in (("fpu avx512f avx512_bf16", True), ("fpu avx2 fma", False), ("fp asimd bf16", True),
                        ("fpu amx_tile amx_bf16", True)):
        path = tmp_path / "cpuinfo"
        key = "Features" if "asimd" in flags else "flags"
        path.write_text(f"processor\t: 0\n{key}\t\t: {flags}\n")
        monkeypatch.setattr(builtins, "open", lambda p, *a, **k: real_open(path if p == "/proc/cpuinfo" else p,
                                                                           *a, **k))
        assert native.cpu_bf16_dot() is want, flags
        monkeypatch.setattr(builtins, "open", real_open)
