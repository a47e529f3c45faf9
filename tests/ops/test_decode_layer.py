"""The native fused decoder layer of a decode step (DecodeLayer in ms_ocr/ops/native/decode_layer.cc, used through
ops/decode_layer.py) against a float64 NumPy implementation of what the composed layer computes, and its
routing. The model parity tests run it inside the real decode graphs against transformers."""

import os

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, nn

from ms_ocr.ops import custom, decode_layer, native
from ms_ocr.ops import kernels as routes
from ms_ocr.ops.attention import NEG_BIAS
from tests.helpers.native import needs_compiler


def _rms(x, w, eps):
    return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + np.concatenate((-x[..., half:], x[..., :half]), -1) * sin


def reference(x, cos, sin, mask, k_cache, v_cache, weights, eps, own=None):
    """float64: input RMSNorm -> q/k/v -> rope (-> q/k RMSNorm) -> softmax over [cache slots + mask, own key] ->
    o_proj + residual -> post RMSNorm -> down(silu(gate) * up) + residual. Returns x, k, v. `own`: the (k, v) the
    attention uses for the token itself instead of its own (bf16 caches: the kernel's rounded ones)."""
    x, cos, sin, mask, k_cache, v_cache = (np.asarray(a, np.float64) for a in (x, cos, sin, mask, k_cache, v_cache))
    weights = [np.asarray(w, np.float64) for w in weights]
    qk_norm = len(weights) == 11
    inw, qw, kw, vw = weights[:4]
    ow, postw, gw, uw, dw = weights[-5:]
    b, hkv, t, d = k_cache.shape
    hq = qw.shape[0] // d
    h = _rms(x[:, 0], inw, eps)
    q = (h @ qw.T).reshape(b, hq, d)
    k = (h @ kw.T).reshape(b, hkv, d)
    v = (h @ vw.T).reshape(b, hkv, d)
    c, s = np.broadcast_to(cos[:, 0, 0], (b, d))[:, None], np.broadcast_to(sin[:, 0, 0], (b, d))[:, None]
    q, k = _rope(q, c, s), _rope(k, c, s)
    if qk_norm:
        q, k = _rms(q, weights[4], eps), _rms(k, weights[5], eps)
    m = np.broadcast_to(mask[:, 0, 0], (b, t))
    ka, va = (k, v) if own is None else (np.asarray(o, np.float64)[:, :, 0] for o in own)
    out = np.zeros((b, hq, d))
    for r in range(b):
        for i in range(hq):
            g = i // (hq // hkv)
            scores = np.concatenate((k_cache[r, g] @ q[r, i] / np.sqrt(d) + m[r], [ka[r, g] @ q[r, i] / np.sqrt(d)]))
            p = np.exp(scores - scores.max())
            p /= p.sum()
            out[r, i] = p[:t] @ v_cache[r, g] + p[t] * va[r, g]
    x1 = x[:, 0] + out.reshape(b, hq * d) @ ow.T
    h2 = _rms(x1, postw, eps)
    gate, up = h2 @ gw.T, h2 @ uw.T
    x2 = x1 + (gate / (1 + np.exp(-gate)) * up) @ dw.T
    return x2[:, None], k[:, :, None], v[:, :, None]


def make_case(rng, b, hidden, hq, hkv, d, inter, t, qk_norm, rope_rows, visible):
    f = lambda *shape, scale=0.3: (rng.standard_normal(shape) * scale).astype(np.float32)
    x = f(b, 1, hidden, scale=1.0)
    angles = rng.uniform(0, 6, (rope_rows, 1, 1, d)).astype(np.float32)  # halves differ: the general rope
    mask = np.full((b, 1, 1, t), NEG_BIAS, np.float32)
    for r in range(b):
        mask[r, ..., :visible[r]] = 0.0
        mask[r, ..., 1] = -2.0 if visible[r] > 1 else NEG_BIAS  # a finite bias is added, not skipped
    weights = [1 + f(hidden, scale=0.1), f(hq * d, hidden), f(hkv * d, hidden), f(hkv * d, hidden)]
    if qk_norm:
        weights += [1 + f(d, scale=0.1), 1 + f(d, scale=0.1)]
    weights += [f(hidden, hq * d), 1 + f(hidden, scale=0.1), f(inter, hidden), f(inter, hidden), f(hidden, inter)]
    return (x, np.cos(angles), np.sin(angles), mask, f(b, hkv, t, d, scale=1.0), f(b, hkv, t, d, scale=1.0),
            weights)


class _Layer(nn.Cell):
    """The layer through `op`, or through the routed op of kernels `kn` (ops/decode_layer.py)."""

    def __init__(self, n_weights, eps, op=None, kn=None):
        super().__init__()
        self.n_weights, self.eps, self.op, self.kn = n_weights, eps, op, kn

    def construct(self, x, cos, sin, mask, k_cache, v_cache, *weights):
        if self.op is not None:
            return self.op(x, cos, sin, mask, k_cache, v_cache, *weights, Tensor(np.array([self.eps], np.float32)))
        return decode_layer.step(self.kn, x, cos, sin, mask, k_cache, v_cache, weights, self.eps)


def _check(outs, ref):
    for got, want in zip(outs, ref):
        got = got.asnumpy()
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 2e-5 * max(1.0, np.abs(want).max())


CASES = [
    # b, hidden, hq, hkv, d, inter, t, qk_norm, rope_rows, visible slots per sequence
    (1, 64, 4, 2, 16, 96, 40, False, 1, [17]),
    (1, 40, 6, 3, 24, 70, 33, True, 1, [0]),     # widths off the 16-lane grid; an empty cache (first step)
    (3, 48, 4, 1, 32, 64, 20, False, 3, [20, 5, 1]),  # per-sequence rope rows and masks, MQA
    (8, 32, 2, 2, 16, 48, 9, True, 1, [9, 8, 7, 6, 5, 4, 3, 2]),
    # the attention loops' blocks: 8 query heads per kv group (two blocks of four), PaddleOCR-VL's head_dim
    (2, 64, 16, 2, 128, 96, 70, False, 1, [70, 33]),
    (1, 48, 5, 1, 40, 64, 30, False, 1, [29]),  # five heads (a block of four and one), odd slot count
    (1, 32, 4, 2, 16, 33, 12, False, 1, [12]),  # an odd MLP width: the threads' SiLU shares cover all of it
    # the attention's blocks of 64 cached rows: five blocks, the last of one row (an odd count: one key alone), eight
    # query heads per kv group and head_dim 128 (PaddleOCR-VL's); and one head per group (DeepSeek's MHA), d off 16
    (1, 64, 16, 2, 128, 96, 300, False, 1, [257]),
    (2, 48, 3, 3, 40, 64, 200, False, 1, [129, 64]),
]


@needs_compiler
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_decode_layer_kernel_matches_numpy(graph_cpu, all_routes, threads, case):
    """The routed op (ops/decode_layer.py) on the machine's own build, on 1 and 2 threads."""
    kernels = native.load()
    assert kernels is not None and all_routes.decode_layer is not None
    kernels.set_threads(threads)
    try:
        args = make_case(np.random.default_rng(sum(case[:7])), *case)
        *tensors, weights = args
        before = kernels.decode_layer_calls
        outs = _Layer(len(weights), 1e-5, kn=all_routes)(*(Tensor(a) for a in tensors), *(Tensor(w) for w in weights))
        _check(outs, reference(*tensors, weights, 1e-5))
        assert kernels.decode_layer_calls == before + 1
    finally:
        kernels.set_threads(len(os.sched_getaffinity(0)))


@needs_compiler
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_decode_layer_bf16_caches(graph_cpu, all_routes, threads, case):
    """--kv-cache-dtype bf16: the kernel reads bf16 caches (widened, exact) and rounds this token's k and v to bf16
    (nearest, ties to even) before its attention uses them, as the cache will hold them: its k, v outputs are the
    reference's rounded (within one bf16 step where fp32 and float64 fall either side of a tie), and its x the
    reference's over the widened caches with those k, v as the token's own."""
    from ms_ocr.convert.loader import round_to_bf16
    kernels = native.load()
    kernels.set_threads(threads)
    try:
        *tensors, weights = make_case(np.random.default_rng(sum(case[:7]) + 1), *case)
        k16, v16 = (round_to_bf16(c) for c in tensors[4:6])
        args = [Tensor(a) for a in tensors[:4]] + [Tensor(k16).astype(ms.bfloat16), Tensor(v16).astype(ms.bfloat16)]
        assert decode_layer.serves(all_routes, args[0], args[4], [Tensor(w) for w in weights], True)
        before = kernels.decode_layer_calls
        x, k, v = (o.asnumpy() for o in _Layer(len(weights), 1e-5, kn=all_routes)(*args, *(Tensor(w) for w in weights)))
        assert kernels.decode_layer_calls == before + 1
        assert np.array_equal(round_to_bf16(k), k) and np.array_equal(round_to_bf16(v), v)  # bf16 values
        _, k_ref, v_ref = reference(*tensors[:4], k16, v16, weights, 1e-5)
        for got, want in ((k, k_ref), (v, v_ref)):
            assert np.abs(got - want).max() <= 2 ** -8 * np.abs(want).max()
            assert np.mean(got == round_to_bf16(want.astype(np.float32))) >= 0.98
        x_ref, _, _ = reference(*tensors[:4], k16, v16, weights, 1e-5, own=(k, v))
        _check([Tensor(x)], [x_ref])
        # the same layer over fp32 caches holding the same values differs: the token's own k, v were rounded
        x32 = _Layer(len(weights), 1e-5, kn=all_routes)(*(Tensor(a) for a in tensors[:4]), Tensor(k16), Tensor(v16),
                                          *(Tensor(w) for w in weights))[0].asnumpy()
        assert not np.array_equal(x32, x)
    finally:
        kernels.set_threads(len(os.sched_getaffinity(0)))


@needs_compiler
def test_decode_layer_at_every_isa_level(graph_cpu, isa_kernels):
    """The library built for each SIMD level this machine runs (x86-64-v2 SSE2, v3 AVX2/FMA, v4 AVX-512, native)
    computes the same layer in every case, over fp32 caches and over bf16 ones (--kv-cache-dtype bf16)."""
    from ms_ocr.convert.loader import round_to_bf16
    kernels = isa_kernels
    before = kernels.decode_layer_calls
    ops_by_qk_norm = custom.native_ops(kernels)[1]
    for case in CASES:
        *tensors, weights = make_case(np.random.default_rng(7), *case)
        op = ops_by_qk_norm[1 if len(weights) == 11 else 0]
        outs = _Layer(len(weights), 1e-6, op)(*(Tensor(a) for a in tensors), *(Tensor(w) for w in weights))
        _check(outs, reference(*tensors, weights, 1e-6))
        k16, v16 = (round_to_bf16(c) for c in tensors[4:6])
        caches = [Tensor(k16).astype(ms.bfloat16), Tensor(v16).astype(ms.bfloat16)]
        x, k, v = _Layer(len(weights), 1e-6, op)(*(Tensor(a) for a in tensors[:4]), *caches,
                                                 *(Tensor(w) for w in weights))
        _check([x], [reference(*tensors[:4], k16, v16, weights, 1e-6, own=(k.asnumpy(), v.asnumpy()))[0]])
    assert kernels.decode_layer_calls == before + 2 * len(CASES)


@needs_compiler
def test_decode_layer_routing(graph_cpu, all_routes, monkeypatch):
    """The kernel serves SiLU-gated layers (fp32 activations, fp32 or bf16 weights) of at most 8 sequences and head_dim <= 512, with the library in
    use; anything else keeps the composed layer."""
    *tensors, weights = make_case(np.random.default_rng(0), *CASES[0])
    x, k_cache = Tensor(tensors[0]), Tensor(tensors[4])
    ws = [Tensor(w) for w in weights]
    kn = all_routes
    assert decode_layer.serves(kn, x, k_cache, ws, True)
    assert not decode_layer.serves(kn, x, k_cache, ws, False)
    assert not decode_layer.serves(kn, Tensor(np.zeros((9, 1, 64), np.float32)), k_cache, ws, True)
    assert not decode_layer.serves(kn, x, Tensor(np.zeros((1, 2, 4, 520), np.float32)), ws, True)
    assert decode_layer.serves(kn, x, k_cache, [w.astype(ms.bfloat16) for w in ws], True)  # bf16-resident weights
    assert not decode_layer.serves(kn, x, k_cache, ws[:-1] + [ws[-1].astype(ms.float16)], True)
    assert not decode_layer.serves(kn, x.astype(ms.bfloat16), k_cache, ws, True)
    assert not decode_layer.serves(kn, x, k_cache.astype(ms.float16), ws, True)
    assert decode_layer.serves(kn, x, k_cache.astype(ms.bfloat16), ws, True)  # --kv-cache-dtype bf16
    assert kn.without_native().decode_layer is None and not decode_layer.serves(kn.without_native(), x, k_cache, ws,
                                                                               True)
    assert routes.choose("Ascend").decode_layer is None
