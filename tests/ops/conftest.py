"""Fixtures of the ops tests: graph mode or PyNative on the CPU with the kernels a process on this machine chooses,
and the native library built for every SIMD level this machine runs."""

import mindspore as ms
import pytest

from ms_ocr.ops import kernels as routes
from tests.helpers.native import build_kernels, isa_builds


@pytest.fixture
def graph_cpu():
    """Graph mode on the CPU; the kernels its process chooses (ops.kernels.choose)."""
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    yield routes.choose("CPU")
    ms.set_context(mode=mode)


@pytest.fixture
def pynative_cpu():
    """PyNative on the CPU: an op runs as it is, without a graph compiled for each input shape (the kernel-level
    checks over many shapes; ~0.5 s of compiling a shape in graph mode). The kernels its process chooses."""
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    yield routes.choose("CPU")
    ms.set_context(mode=mode)


@pytest.fixture
def all_routes(monkeypatch):
    """The kernels with every native kernel routed, whatever the route table says for this machine's level (the
    routing tests)."""
    monkeypatch.setenv(routes.ROUTES_ENV, "all")
    return routes.choose("CPU")


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
