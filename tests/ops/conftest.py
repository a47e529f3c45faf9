"""Fixtures of the ops tests: graph mode on the CPU with the kernels configured, and the native library built for
a CPU without AVX-512."""

import mindspore as ms
import pytest

from ms_ocr.ops import backend, native


@pytest.fixture
def graph_cpu():
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    backend.configure("CPU")
    yield
    ms.set_context(mode=mode)


@pytest.fixture(scope="session")
def portable_kernels(tmp_path_factory):
    """The library built for x86-64-v2 (the loops compiled where AVX-512 is missing), on 2 threads."""
    kernels = native.NativeKernels(native.build(str(tmp_path_factory.mktemp("portable")), arch="x86-64-v2"))
    assert not kernels.avx512
    kernels.set_threads(2)
    return kernels
