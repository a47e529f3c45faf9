"""The native GELU kernels (GeluTanh / GeluErf in ms_ocr/ops/native/activation.cc), which ops.gelu_tanh / gelu_erf use
on the CPU for fp32: against float64 NumPy (the exact GELU through math.erf), against the composed formulas, at
every ISA level this machine builds, and their routing."""

import math
import os

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, nn

from ms_ocr import ops as K
from ms_ocr.ops import custom, native
from tests.helpers.native import needs_compiler



class _Act(nn.Cell):
    """A Custom op on x, or with kernels `kn` an activation of ops/activation.py."""

    def __init__(self, fn, kn=None):
        super().__init__()
        self.fn, self.kn = fn, kn

    def construct(self, x):
        if self.kn is None:
            return self.fn(x)
        return self.fn(self.kn, x)


def reference(x, erf_form):
    x = x.astype(np.float64)
    if erf_form:
        return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _inputs():
    rng = np.random.default_rng(0)
    # every range the formulas take apart: tails where exp under/overflows, around 0, and a 16-lane tail
    x = np.concatenate([rng.standard_normal(40_000) * 3, np.linspace(-100, 100, 2001), [0.0, -0.0, 1e-30, 5.0]])
    return x.astype(np.float32).reshape(-1, 5)


@needs_compiler
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("erf_form", [False, True])
def test_gelu_kernels_match_numpy_and_composed(graph_cpu, all_routes, threads, erf_form):
    kernels = native.load()
    assert kernels is not None and all_routes.gelu is not None
    kernels.set_threads(threads)
    try:
        x = _inputs()
        fn = K.gelu_erf if erf_form else K.gelu_tanh
        before = kernels.gelu_calls
        out = _Act(fn, all_routes)(Tensor(x)).asnumpy()
        assert kernels.gelu_calls == before + 1 and out.shape == x.shape
        assert np.abs(out - reference(x, erf_form)).max() <= 5e-5  # |x| up to 100: a few fp32 ulps
        composed = _Act(fn, all_routes.without_native())(Tensor(x)).asnumpy()
        assert kernels.gelu_calls == before + 1
        assert np.abs(out - composed).max() <= 5e-5
    finally:
        kernels.set_threads(len(os.sched_getaffinity(0)))


@needs_compiler
def test_gelu_at_every_isa_level(graph_cpu, isa_kernels):
    """The library built for each SIMD level this machine runs (x86-64-v2 SSE2, v3 AVX2/FMA, v4 AVX-512, native)
    gives both GELUs within the same bound."""
    kernels = isa_kernels
    before = kernels.gelu_calls
    x = _inputs()
    for op, erf_form in zip(custom.native_ops(kernels)[3], (False, True)):
        out = _Act(op)(Tensor(x)).asnumpy()
        assert np.abs(out - reference(x, erf_form)).max() <= 5e-5, (kernels.isa_level, erf_form)
    assert kernels.gelu_calls == before + 2


@needs_compiler
def test_gelu_routing(graph_cpu, all_routes):
    """fp32 takes the kernel; other dtypes and graphs built for export keep the composed formulas."""
    kernels = native.load()
    x = _inputs()[:50]
    before = kernels.gelu_calls
    out16 = _Act(K.gelu_tanh, all_routes)(Tensor(x).astype(ms.float16)).asnumpy()
    assert kernels.gelu_calls == before
    assert np.abs(out16.astype(np.float64) - reference(x, False)).max() <= 0.1
    assert all_routes.without_native().gelu is None and all_routes.gelu is not None
