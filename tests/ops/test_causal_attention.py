"""The native causal attention of a prompt (CausalAttention in ms_ocr/ops/native/attention.cc), which the prefill
layer graphs use on the CPU (nn.functional.causal_block_attention): against float64 NumPy with grouped-query
heads, queries that are the last S of T positions and row counts off the 32-row tile, at every ISA level this
machine builds; and against the composed block attention it replaces. The model parity tests run it inside
every prefill against transformers."""

import os

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, nn

from ms_ocr import ops as K
from ms_ocr.nn import functional as F
from ms_ocr.ops import custom, native
from tests.helpers.native import needs_compiler


def make_case(rng, b, h, hkv, s, d, t):
    q = rng.standard_normal((b, h, s, d)).astype(np.float32) * 2  # peaked softmaxes too
    k = rng.standard_normal((b, hkv, t, d)).astype(np.float32)
    return q, k, rng.standard_normal((b, hkv, t, d)).astype(np.float32)


def reference(q, k, v, scale):
    """float64: query row i (position T - S + i) over keys 0 .. T - S + i, head h reading kv head h // (H/Hkv)."""
    s, t, rep = q.shape[2], k.shape[2], q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, 1).astype(np.float64), np.repeat(v, rep, 1).astype(np.float64)
    scores = np.einsum("bhsd,bhtd->bhst", q.astype(np.float64) * scale, k)
    visible = np.arange(t)[None, :] <= (t - s + np.arange(s))[:, None]
    scores = np.where(visible, scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhst,bhtd->bhsd", p, v)


CASES = [  # b, h, hkv, s, d, t: GQA groups, rows off the 32-row tile, queries the last S of T, head dims 8..256
    (1, 16, 2, 100, 128, 100), (2, 3, 3, 37, 72, 37), (1, 4, 1, 5, 64, 40), (1, 2, 2, 1, 8, 1),
    (1, 4, 2, 70, 256, 75),
]


class _Causal(nn.Cell):
    def __init__(self, scale, block=None, op=None, kn=None):
        super().__init__()
        self.scale, self.block, self.op, self.kn = scale, block, op, kn

    def construct(self, q, k, v):
        if self.op is not None:
            return self.op(q, k, v, Tensor(np.array([self.scale], np.float32)))
        return F.causal_block_attention(self.kn, q, k, v, self.block, self.scale)


@needs_compiler
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_causal_kernel_matches_numpy(graph_cpu, all_routes, threads, case):
    kernels = native.load()
    assert kernels is not None and all_routes.causal_attention is not None
    kernels.set_threads(threads)
    try:
        q, k, v = make_case(np.random.default_rng(sum(case)), *case)
        scale = case[4] ** -0.5
        before = kernels.attention_calls
        out = _Causal(scale, op=all_routes.causal_attention)(Tensor(q), Tensor(k), Tensor(v)).asnumpy()
        assert kernels.attention_calls == before + 1
        ref = reference(q, k, v, scale)
        assert out.shape == ref.shape and np.abs(out - ref).max() <= 2e-6 * max(1.0, np.abs(ref).max())
    finally:
        kernels.set_threads(len(os.sched_getaffinity(0)))


@needs_compiler
def test_causal_kernel_at_every_isa_level(graph_cpu, isa_kernels):
    """The library built for each SIMD level this machine runs computes the same causal attention."""
    op = custom.native_ops(isa_kernels)[4]
    for case in CASES:
        q, k, v = make_case(np.random.default_rng(3), *case)
        scale = case[4] ** -0.5
        out = _Causal(scale, op=op)(Tensor(q), Tensor(k), Tensor(v)).asnumpy()
        ref = reference(q, k, v, scale)
        assert np.abs(out - ref).max() <= 2e-6 * max(1.0, np.abs(ref).max()), (isa_kernels.isa_level, case)


@needs_compiler
def test_prefill_attention_routing(graph_cpu, all_routes):
    """A prompt's causal attention takes the kernel where it is routed (fp32, head_dim a multiple of 8 up to 256)
    and the composed query blocks elsewhere (bf16, graphs built for export); both compute the same."""
    t = lambda *shape, dtype=ms.float32: Tensor(np.zeros(shape, np.float32)).astype(dtype)
    kn = all_routes
    assert K.native_causal_ok(kn, t(1, 16, 50, 128), t(1, 2, 50, 128), t(1, 2, 50, 128))
    assert not K.native_causal_ok(kn, t(1, 16, 50, 12), t(1, 2, 50, 12), t(1, 2, 50, 12))
    assert not K.native_causal_ok(kn, t(1, 16, 50, 128), t(1, 3, 50, 128), t(1, 3, 50, 128))
    assert not K.native_causal_ok(kn, t(1, 4, 50, 64), t(1, 2, 40, 64), t(1, 2, 40, 64))  # fewer keys than queries
    assert not K.native_causal_ok(kn, t(1, 16, 50, 128, dtype=ms.bfloat16), t(1, 2, 50, 128), t(1, 2, 50, 128))
    kernels = native.load()
    q, k, v = make_case(np.random.default_rng(5), 1, 16, 2, 300, 128, 300)
    scale = 128 ** -0.5
    exported = kn.without_native()
    assert not K.native_causal_ok(exported, Tensor(q), Tensor(k), Tensor(v))
    before = kernels.attention_calls
    composed = _Causal(scale, block=64, kn=exported)(Tensor(q), Tensor(k), Tensor(v)).asnumpy()
    assert kernels.attention_calls == before
    native_out = _Causal(scale, block=64, kn=kn)(Tensor(q), Tensor(k), Tensor(v)).asnumpy()
    assert kernels.attention_calls == before + 1
    ref = reference(q, k, v, scale)
    assert np.abs(composed - ref).max() <= 2e-6 * np.abs(ref).max()
    assert np.abs(native_out - ref).max() <= 2e-6 * np.abs(ref).max()
