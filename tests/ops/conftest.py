"""Fixtures of the ops tests: graph mode on the CPU with the kernels configured, and the native library built for
every SIMD level this machine runs."""

import mindspore as ms
import pytest

from ms_ocr.ops import backend
from tests.helpers.native import build_kernels, isa_builds


@pytest.fixture
def graph_cpu():
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    backend.configure("CPU")
    yield
    ms.set_context(mode=mode)


@pytest.fixture
def pynative_cpu():
    """PyNative on the CPU: an op runs as it is, without a graph compiled for each input shape (the kernel-level
    checks over many shapes; ~0.5 s of compiling a shape in graph mode)."""
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    backend.configure("CPU")
    yield
    ms.set_context(mode=mode)


@pytest.fixture
def all_routes(monkeypatch):
    """Every native kernel routed whatever the route table says for this machine's level (the routing tests)."""
    monkeypatch.setenv(backend.ROUTES_ENV, "all")
    backend.configure("CPU")
    yield
    monkeypatch.undo()
    backend.configure("CPU")


@pytest.fixture
def bf16_unset(monkeypatch):
    """The process's --dtype bf16 state (backend.BF16_NAMES, set once by enable_bf16_products) cleared for the test
    and restored after it."""
    for name in backend.BF16_NAMES:
        monkeypatch.setattr(backend, name, None)


_BUILDS = {}


@pytest.fixture(params=isa_builds(), ids=lambda b: b[0])
def isa_kernels(request):
    """The library built for one -march target (x86-64-v2 = the SSE2 fallback, x86-64-v3 = AVX2/FMA, x86-64-v4 =
    AVX-512, native), on 2 threads; built once per session (and cached across runs like the runtime's build)."""
    arch, level = request.param
    if arch not in _BUILDS:
        _BUILDS[arch] = build_kernels(arch)
    kernels = _BUILDS[arch]
    assert level is None or kernels.isa_level == level
    kernels.set_threads(2)
    return kernels
