"""The native CPU kernels (ms_ocr/ops/native): built with the machine's compiler, run as MindSpore Custom ops
in graph mode against NumPy, and the fallbacks when they cannot be built or are switched off."""

import os
import shutil

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, nn

from ms_ocr.ops import backend, native
from ms_ocr.ops import linear as linear_mod
from tests.helpers.native import needs_compiler, needs_x86



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
def test_matmul_t_kernel_matches_numpy(graph_cpu, threads, m, n, k):
    """Every row count the kernel takes (its 8/4/3-row weight blocks and the single-row tail), widths with and
    without a 16-lane tail, outputs shorter than one block; on 1 and 2 threads."""
    kernels = native.load()
    assert kernels is not None and backend.NATIVE_MATMUL_T is not None
    kernels.set_threads(threads)
    try:
        x, w = _case(np.random.default_rng(m * 7 + n), m, n, k)
        out = _Apply(backend.NATIVE_MATMUL_T)(Tensor(x), Tensor(w)).asnumpy()
        ref = x.astype(np.float64) @ w.astype(np.float64).T
        assert out.shape == (m, n)
        assert np.abs(out - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
    finally:
        kernels.set_threads(len(os.sched_getaffinity(0)))


@needs_compiler
@needs_x86
def test_portable_loops_match_numpy(graph_cpu, portable_kernels):
    """The loops compiled where AVX-512 is missing (built here for x86-64-v2) give the same products."""
    kernels = portable_kernels
    before = kernels.matmul_t_calls
    op = backend.native_ops(kernels)[0]
    for m, n, k in [(1, 1030, 1000), (3, 5, 37), (8, 257, 1152)]:
        x, w = _case(np.random.default_rng(m + n), m, n, k)
        ref = x.astype(np.float64) @ w.astype(np.float64).T
        out = _Apply(op)(Tensor(x), Tensor(w)).asnumpy()
        assert np.abs(out - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
    assert kernels.matmul_t_calls == before + 3


@needs_compiler
@pytest.mark.parametrize("m,native_used", [(1, True), (8, True), (9, False)])
def test_matmul_t_routes_by_rows_and_weight_size(graph_cpu, monkeypatch, m, native_used):
    calls = []
    real = backend.NATIVE_MATMUL_T
    monkeypatch.setattr(backend, "NATIVE_MATMUL_T", real)
    monkeypatch.setattr(linear_mod, "NATIVE_MIN_WEIGHT", 96 * 64)
    monkeypatch.setattr(linear_mod, "_mm", _Recorder(linear_mod._mm, "matmul", calls))
    monkeypatch.setattr(backend, "NATIVE_MATMUL_T", _Recorder(real, "native", calls))
    x, w = _case(np.random.default_rng(m), m, 96, 64)
    out = linear_mod.matmul_t(Tensor(x), Tensor(w)).asnumpy()
    assert calls == ["native" if native_used else "matmul"]
    assert np.abs(out - x @ w.T).max() < 1e-4
    calls.clear()
    small = Tensor(w[:95])  # one element row fewer than the threshold: MindSpore's MatMul
    linear_mod.matmul_t(Tensor(x), small)
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
    assert backend.configure("CPU") == "CPU" and backend.NATIVE_MATMUL_T is None
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.delenv(native.ENV_SWITCH)
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("MS_OCR_HOME", str(tmp_path))
    assert native.load() is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "native CPU kernels unavailable, using MindSpore's" in err
    monkeypatch.undo()  # the process's loaded library and environment back, then the kernels chosen again
    backend.configure("CPU")
    assert backend.NATIVE_MATMUL_T is not None or shutil.which(os.environ.get("CXX", "g++")) is None


@needs_compiler
def test_configure_and_export_contexts(graph_cpu):
    assert backend.NATIVE_MATMUL_T is not None and backend.native_kernels() is native.load()
    with backend.without_native():
        assert backend.NATIVE_MATMUL_T is None and backend.native_kernels() is None
    with backend.portable():
        assert backend.NATIVE_MATMUL_T is None
    assert backend.NATIVE_MATMUL_T is not None
    assert backend.configure("Ascend") == "Ascend" and backend.NATIVE_MATMUL_T is None
    backend.configure("CPU")
    assert backend.NATIVE_MATMUL_T is not None
