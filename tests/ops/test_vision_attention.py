"""The native bidirectional attention (VisionAttention in ms_ocr/ops/native/attention.cc), which ops.attention uses
on the CPU for unmasked fp32 attention (the vision encoders): against float64 NumPy at every ISA level this
machine builds, and its routing. The model parity tests run it inside the vision towers against transformers."""

import importlib
import os

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, nn, ops

from ms_ocr import ops as K
from ms_ocr.ops import custom, native
from tests.helpers.native import needs_compiler

attention_mod = importlib.import_module("ms_ocr.ops.attention")  # the package exports the function under this name


class _Attend(nn.Cell):
    def __init__(self, scale, masked=False, op=None, kn=None):
        super().__init__()
        self.scale, self.masked, self.op, self.kn = scale, masked, op, kn

    def construct(self, q, k, v):
        if self.op is not None:
            return self.op(q, k, v, Tensor(np.array([self.scale], np.float32)))
        mask = None
        if self.masked:
            mask = K.attention_mask(self.kn, ops.ones((1, 1, q.shape[2], k.shape[2]), ms.bool_))
        return K.attention(self.kn, q, k, v, mask, self.scale)


def reference(q, k, v, scale):
    s = np.einsum("bhsd,bhtd->bhst", q.astype(np.float64) * scale, k.astype(np.float64))
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhst,bhtd->bhsd", p, v.astype(np.float64))


def _case(rng, b, h, s, d, t):
    q = rng.standard_normal((b, h, s, d)).astype(np.float32) * 2  # peaked softmaxes too
    return q, rng.standard_normal((b, h, t, d)).astype(np.float32), rng.standard_normal((b, h, t, d)).astype(np.float32)


CASES = [  # b, h, s, d, t: row counts off the 32-row task, key counts off the 8-key tile, head dims 8..256
    (1, 2, 37, 72, 45), (2, 3, 5, 64, 9), (1, 1, 64, 16, 1), (1, 4, 100, 8, 300), (1, 2, 33, 256, 20),
]


@needs_compiler
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_attention_kernel_matches_numpy(graph_cpu, all_routes, threads, case):
    kernels = native.load()
    assert kernels is not None and all_routes.attention is not None
    kernels.set_threads(threads)
    try:
        q, k, v = _case(np.random.default_rng(sum(case)), *case)
        scale = case[3] ** -0.5
        before = kernels.attention_calls
        out = _Attend(scale, kn=all_routes)(Tensor(q), Tensor(k), Tensor(v)).asnumpy()
        assert kernels.attention_calls == before + 1
        ref = reference(q, k, v, scale)
        assert out.shape == ref.shape and np.abs(out - ref).max() <= 2e-6 * max(1.0, np.abs(ref).max())
    finally:
        kernels.set_threads(len(os.sched_getaffinity(0)))


@needs_compiler
def test_attention_at_every_isa_level(graph_cpu, isa_kernels):
    """The library built for each SIMD level this machine runs (x86-64-v2 SSE2, v3 AVX2/FMA, v4 AVX-512, native;
    each with its own row-block and register-tile sizes) computes the same attention in every case."""
    kernels = isa_kernels
    before = kernels.attention_calls
    op = custom.native_ops(kernels)[2]
    for case in CASES:
        q, k, v = _case(np.random.default_rng(3), *case)
        scale = case[3] ** -0.5
        out = _Attend(scale, op=op)(Tensor(q), Tensor(k), Tensor(v)).asnumpy()
        ref = reference(q, k, v, scale)
        assert np.abs(out - ref).max() <= 2e-6 * max(1.0, np.abs(ref).max()), (kernels.isa_level, case)
    assert kernels.attention_calls == before + len(CASES)


@needs_compiler
def test_attention_routing(graph_cpu, all_routes):
    """Unmasked fp32 attention with one kv head per query head and head_dim a multiple of 8 up to 256 takes the
    kernel; masked, grouped-query, other head dims, other dtypes, and graphs built for export do not. The
    composed route computes the same."""
    t = lambda *shape, dtype=ms.float32: Tensor(np.zeros(shape, np.float32)).astype(dtype)
    kn = all_routes
    assert attention_mod._native_ok(kn, t(1, 4, 5, 72), t(1, 4, 9, 72), t(1, 4, 9, 72))
    assert not attention_mod._native_ok(kn, t(1, 4, 5, 72), t(1, 2, 9, 72), t(1, 2, 9, 72))
    assert not attention_mod._native_ok(kn, t(1, 4, 5, 12), t(1, 4, 9, 12), t(1, 4, 9, 12))
    assert not attention_mod._native_ok(kn, t(1, 4, 5, 264), t(1, 4, 9, 264), t(1, 4, 9, 264))
    assert not attention_mod._native_ok(kn, t(1, 4, 5, 72, dtype=ms.bfloat16), t(1, 4, 9, 72), t(1, 4, 9, 72))
    assert kn.without_native().attention is None
    assert not attention_mod._native_ok(kn.without_native(), t(1, 4, 5, 72), t(1, 4, 9, 72), t(1, 4, 9, 72))
    kernels = native.load()
    q, k, v = _case(np.random.default_rng(5), 1, 2, 37, 72, 45)
    before = kernels.attention_calls
    composed = _Attend(0.2, masked=True, kn=kn)(Tensor(q), Tensor(k), Tensor(v)).asnumpy()  # an all-visible mask
    assert kernels.attention_calls == before
    fused = _Attend(0.2, kn=kn)(Tensor(q), Tensor(k), Tensor(v)).asnumpy()
    assert kernels.attention_calls == before + 1
    assert np.abs(fused - composed).max() <= 2e-6 * np.abs(composed).max()
