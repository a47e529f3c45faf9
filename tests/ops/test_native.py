"""The native CPU kernels (ms_ocr/ops/native): built with the machine's compiler, run as MindSpore Custom ops
in graph mode against NumPy, and the fallbacks when they cannot be built or are switched off."""

import dataclasses
import os
import shutil

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, nn

from ms_ocr.ops import custom, native
from ms_ocr.ops import kernels as routes
from ms_ocr.ops import linear as linear_mod
from tests.helpers.native import build_kernels, needs_compiler, needs_x86


class _Apply(nn.Cell):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def construct(self, x, w):
        return self.fn(x, w)


def _case(rng, m, n, k):
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)


@needs_compiler
def test_library_builds_once_into_its_cache(tmp_path):
    first = native.build(str(tmp_path))
    mtime = os.path.getmtime(first)
    assert native.build(str(tmp_path)) == first and os.path.getmtime(first) == mtime
    assert os.path.basename(first) == native.LIB_NAME
    assert os.listdir(os.path.dirname(first)) == [native.LIB_NAME]  # no temporary left behind


@needs_compiler
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 8])
@pytest.mark.parametrize("n,k", [(5, 37), (1030, 1000), (64, 16), (257, 1152), (3, 1)])
def test_matmul_t_kernel_matches_numpy(pynative_cpu, threads, m, n, k):
    """Every row count the kernel takes (its weight blocks of each level and the single-row tail), widths with and
    without a vector tail, outputs shorter than one block; on 1 and 2 threads (the machine's own build)."""
    kernels = native.load()
    assert kernels is not None
    kernels.set_threads(threads)
    try:
        x, w = _case(np.random.default_rng(m * 7 + n), m, n, k)
        out = custom.native_ops(kernels)[0](Tensor(x), Tensor(w)).asnumpy()
        ref = x.astype(np.float64) @ w.astype(np.float64).T
        assert out.shape == (m, n)
        assert np.abs(out - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
    finally:
        kernels.set_threads(len(os.sched_getaffinity(0)))


@needs_compiler
def test_matmul_t_at_every_isa_level(pynative_cpu, isa_kernels):
    """The library built for each SIMD level this machine runs (x86-64-v2 SSE2, v3 AVX2/FMA, v4 AVX-512, native)
    gives the same products: every row count (each level sizes its weight blocks from its register count), with
    and without a vector tail."""
    kernels = isa_kernels
    before = kernels.matmul_t_calls
    op = custom.native_ops(kernels)[0]
    shapes = [(m, n, k) for m in range(1, 9) for n, k in [(1030, 1000), (5, 37), (19, 3)]]
    for m, n, k in shapes:
        x, w = _case(np.random.default_rng(m + n), m, n, k)
        ref = x.astype(np.float64) @ w.astype(np.float64).T
        out = op(Tensor(x), Tensor(w)).asnumpy()
        assert np.abs(out - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max()), (kernels.isa_level, m, n, k)
    assert kernels.matmul_t_calls == before + len(shapes)


@needs_compiler
def test_isa_level_of_each_build(monkeypatch):
    """The machine's own build reports the widest level its CPU flags allow; MS_OCR_NATIVE_ARCH picks the -march
    of the runtime's build and is part of the cache key. In the runtime's own cache folder, where the suite's other
    tests have built (or will build) both libraries already: a compile from nothing is the test above's."""
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    monkeypatch.delenv(native.ARCH_ENV, raising=False)
    level = native.NativeKernels(native.build()).isa_level
    if "avx512f" in flags:
        assert level == "avx512"
    elif {"avx2", "fma"} <= set(flags):
        assert level == "avx2"
    else:
        assert level in native.ISA_LEVELS
    monkeypatch.setenv(native.ARCH_ENV, "x86-64-v2" if "sse2" in flags else "armv8-a")
    portable = native.build()
    assert os.path.dirname(portable) != os.path.dirname(native.build(arch="native"))
    assert native.NativeKernels(portable).isa_level in ("sse2", "neon")


@needs_compiler
def test_route_table_applied_by_choose(graph_cpu, monkeypatch, capsys):
    """choose routes exactly the kernels ROUTES lists for the library's level; MS_OCR_NATIVE_ROUTES overrides it;
    a level without measurements routes none."""
    level = native.load().isa_level
    monkeypatch.delenv(routes.ROUTES_ENV, raising=False)
    monkeypatch.setitem(routes.ROUTES, level, ("attention", "gelu"))
    kn = routes.choose("CPU")
    assert kn.routes == ("attention", "gelu")
    assert kn.matmul_t is None and kn.decode_layer is None
    assert kn.attention is not None and kn.gelu is not None
    assert kn.library is native.load()
    monkeypatch.setitem(routes.ROUTES, level, ())
    assert routes.choose("CPU").routes == ()
    monkeypatch.setenv(routes.ROUTES_ENV, "matmul_t, decode_layer,bogus")
    assert routes.choose("CPU").routes == ("matmul_t", "decode_layer")
    assert "unknown kernels ['bogus']" in capsys.readouterr().err
    monkeypatch.setenv(routes.ROUTES_ENV, "all")
    tiles = native.load().amx_products and os.environ.get(routes.AMX_ENV) != "0"  # GemmAmx: only with the tiles
    assert routes.choose("CPU").routes == tuple(k for k in routes.KERNELS if tiles or k != "amx_products")
    monkeypatch.setenv(routes.ROUTES_ENV, "none")
    assert routes.choose("CPU").routes == ()
    assert routes.native_routes("no-such-level") == ()
    monkeypatch.delenv(routes.ROUTES_ENV)
    assert routes.native_routes("neon") == ()  # not measured on an aarch64 host
    monkeypatch.undo()
    assert set(routes.ROUTES) == set(native.ISA_LEVELS)
    assert all(set(r) <= set(routes.KERNELS) for r in routes.ROUTES.values())


@needs_compiler
@needs_x86
def test_avx2_build_routes_its_levels_kernels(graph_cpu, monkeypatch):
    """A process whose library is the x86-64-v3 (AVX2/FMA) build gets the avx2 row of the route table, whatever
    the CPU runs: the kernels measured faster at that level, not VisionAttention."""
    monkeypatch.delenv(routes.ROUTES_ENV, raising=False)
    monkeypatch.setitem(native._state, "kernels", build_kernels("x86-64-v3"))
    kn = routes.choose("CPU")
    assert native.isa_level() == "avx2"
    assert kn.routes == tuple(routes.ROUTES["avx2"])
    assert kn.attention is None and kn.matmul_t is not None
    assert kn.causal_attention is not None  # measured faster at AVX2 too (ops/kernels.py)


@needs_compiler
@pytest.mark.parametrize("m,native_used", [(1, True), (8, True), (9, False)])
def test_matmul_t_routes_by_rows_and_weight_size(graph_cpu, all_routes, monkeypatch, m, native_used):
    calls = []
    kn = dataclasses.replace(all_routes, matmul_t=_Recorder(all_routes.matmul_t, "native", calls))
    monkeypatch.setattr(linear_mod, "NATIVE_MIN_WEIGHT", 96 * 64)
    monkeypatch.setattr(linear_mod, "_mm", _Recorder(linear_mod._mm, "matmul", calls))
    x, w = _case(np.random.default_rng(m), m, 96, 64)
    out = linear_mod.matmul_t(kn, Tensor(x), Tensor(w)).asnumpy()
    assert calls == ["native" if native_used else "matmul"]
    assert np.abs(out - x @ w.T).max() < 1e-4
    calls.clear()
    small = Tensor(w[:95])  # one element row fewer than the threshold: MindSpore's MatMul
    linear_mod.matmul_t(kn, Tensor(x), small)
    assert calls == ["matmul"]


class _Recorder:
    def __init__(self, op, name, calls):
        self.op, self.name, self.calls = op, name, calls

    def __call__(self, *args):
        self.calls.append(self.name)
        return self.op(*args)


def test_switched_off_or_unbuildable_falls_back(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert native.load() is None
    assert routes.choose("CPU") is routes.COMPOSED
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.delenv(native.ENV_SWITCH)
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("MS_OCR_HOME", str(tmp_path))
    monkeypatch.setattr(native, "LIB_DIR", str(tmp_path / "lib"))  # an install without its libraries
    assert native.load() is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "native CPU kernels unavailable" in err and "MindSpore's kernels, slower" in err
    assert "install g++ and run python -m ms_ocr.ops.native" in err
    monkeypatch.undo()  # the process's loaded library and environment back
    assert native.load() is not None or shutil.which(os.environ.get("CXX", "g++")) is None


@needs_compiler
def test_kernels_for_export_name_no_library(graph_cpu, all_routes):
    assert all_routes.matmul_t is not None and all_routes.library is native.load()
    exported = all_routes.without_native()
    assert exported.matmul_t is None and exported.library is None and exported.routes == ()
    assert all_routes.for_onnx().matmul_t is None and all_routes.for_onnx().portable
    assert all_routes.matmul_t is not None  # the process's own choice is unchanged
    assert routes.choose("Ascend").matmul_t is None and routes.choose("Ascend").fused
