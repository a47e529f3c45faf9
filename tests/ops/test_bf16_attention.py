"""VisionAttentionBf16 / VisionAttentionBf16Rows (ms_ocr/ops/native): --dtype bf16's vision attention,
on Intel's AMX tiles or, where the tiles are off (AMD Zen 4; MS_OCR_AMX=0) or the head dim is past theirs, with
AVX512_BF16's VDPBF16PS. What both are documented to compute: q and k rounded to bf16, their dot products summed in
fp32, times the scale; a softmax in fp32 whose probabilities are rounded to bf16 before they weight the values
(rounded to bf16), the sums divided by the total of the rounded probabilities — checked against float64 NumPy over
the same roundings, on head dims off the kernels' grids and row / key counts off the blocks. Then the routing
(ops/attention.py) with products in bf16 on. A path the CPU lacks skips."""

import numpy as np
import pytest
from mindspore import Tensor

from ms_ocr.ops import custom, kernels as routes
from tests.helpers.native import bf16_kernels, build_kernels, needs_compiler
from tests.ops.test_gemm_bf16 import rne_bf16


@pytest.fixture(scope="module", params=[("native", "amx"), ("x86-64-v3", "amx"), ("native", "dpbf16"),
                                        ("x86-64-v3", "dpbf16")], ids=lambda p: "-".join(p))
def kernels(request):
    arch, path = request.param
    k = build_kernels(arch)
    k.set_threads(2)
    amx = k.amx_init(path == "amx")
    dp = k.dpbf16_init(path == "dpbf16")
    if path == "amx" and not amx:
        pytest.skip("this CPU (or kernel) gives no AMX-BF16 tiles")
    if path == "dpbf16" and not dp:
        pytest.skip("this CPU (or kernel) has no AVX512_BF16")
    k.attention_path = path
    yield k
    k.amx_init(False)
    k.dpbf16_init(False)


def reference(q, k, v, scale):
    """float64 over the kernel's roundings: [B, H, S, D]."""
    qr, kr, vr = (rne_bf16(a).astype(np.float64) for a in (q, k, v))
    s = np.einsum("bhsd,bhtd->bhst", qr, kr) * np.float64(np.float32(scale))
    p = np.exp(s - s.max(-1, keepdims=True))
    pr = rne_bf16(p.astype(np.float32)).astype(np.float64)
    return np.einsum("bhst,bhtd->bhsd", pr, vr) / pr.sum(-1, keepdims=True)


def exact(q, k, v, scale):
    s = np.einsum("bhsd,bhtd->bhst", q.astype(np.float64), k.astype(np.float64)) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhst,bhtd->bhsd", p / p.sum(-1, keepdims=True), v.astype(np.float64))


@needs_compiler
@pytest.mark.parametrize("b,h,s,t,d", [(1, 4, 37, 53, 72), (2, 3, 16, 32, 64), (1, 2, 50, 1, 96), (1, 2, 20, 70, 40),
                                       (1, 2, 33, 65, 128), (1, 3, 70, 31, 8)])
def test_attention_bf16_matches_the_rounded_reference(kernels, pynative_cpu, b, h, s, t, d):
    if kernels.attention_path == "amx" and d > routes.AMX_ATTENTION_MAX_DIM:
        pytest.skip("past the tiles' head dims (the AVX512_BF16 kernel's, which is off here)")
    rng = np.random.default_rng(s + t + d)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((b, h, s, d), (b, h, t, d), (b, h, t, d)))
    scale = d ** -0.5
    heads_op, rows_op = custom.bf16_attention_ops(kernels)
    before = kernels.attention_calls
    got = heads_op(Tensor(q), Tensor(k), Tensor(v), Tensor(np.array([scale], np.float32))).asnumpy()
    rows = rows_op(Tensor(q), Tensor(k), Tensor(v), Tensor(np.array([scale], np.float32))).asnumpy()
    assert kernels.attention_calls == before + 2
    want = reference(q, k, v, scale)
    assert got.shape == want.shape and rows.shape == (b, s, h * d)
    err = np.abs(got - want).max()
    assert err <= 2e-3 * np.abs(want).max()
    # the roundings are what it computes: the unrounded attention is further off (but within bf16's resolution)
    off = np.abs(got - exact(q, k, v, scale)).max()
    assert off <= 3e-2 * np.abs(want).max() and (t == 1 or off > 2 * err)
    assert np.array_equal(rows, got.transpose(0, 2, 1, 3).reshape(b, s, h * d))


@needs_compiler
def test_attention_bf16_on_two_threads_and_after_a_larger_call(kernels, pynative_cpu):
    """Each thread packs one head at a time into buffers it keeps between calls: two threads give the bits one
    thread gives, and a small call after a large one (buffers larger than it needs, holding the large call's data)
    the bits it gives in a fresh library."""
    rng = np.random.default_rng(7)
    scale = Tensor(np.array([72 ** -0.5], np.float32))
    big = [Tensor(rng.standard_normal((2, 5, n, 72)).astype(np.float32)) for n in (70, 300, 300)]
    small = [Tensor(rng.standard_normal((1, 3, n, 72)).astype(np.float32)) for n in (21, 45, 45)]
    _, rows_op = custom.bf16_attention_ops(kernels)
    try:
        kernels.set_threads(1)
        one = rows_op(*small, scale).asnumpy()
        kernels.set_threads(2)
        rows_op(*big, scale).asnumpy()
        two = rows_op(*small, scale).asnumpy()
    finally:
        kernels.set_threads(2)
    assert np.array_equal(one, two)
    q, k, v = (t.asnumpy() for t in small)
    want = reference(q, k, v, 72 ** -0.5).transpose(0, 2, 1, 3).reshape(1, 21, 3 * 72)
    assert np.abs(two - want).max() <= 2e-3 * np.abs(want).max()


@needs_compiler
def test_bf16_products_route_vision_attention_to_the_bf16_kernels(pynative_cpu, monkeypatch):
    """--dtype bf16 on a CPU with AMX or AVX512_BF16: a VLM vision encoder's attention (ops/attention.py attention /
    attention_rows with bf16_ok, no mask) takes VisionAttentionBf16(Rows): on the tiles for head dims up to 96
    ("amx_attention" in the routes, the compile cache's key), with VDPBF16PS where the tiles are off (MS_OCR_AMX=0,
    or a CPU without them) or the head dim is past theirs ("dpbf16_attention"). Callers that do not opt in (the
    layout model) keep the fp32 kernel (exact to fp32 sums), and so does a head dim of 128 with the tiles alone."""
    from ms_ocr import ops as K
    from ms_ocr.ops import native
    kernels = native.load()
    if kernels is None or not native.cpu_bf16_dot() or not kernels.load_dnnl():
        pytest.skip("no bf16 products here")
    amx_cpu, dp_cpu = kernels.amx_init(True), kernels.dpbf16_init(True)
    if not (amx_cpu or dp_cpu):
        pytest.skip("neither AMX-BF16 tiles nor AVX512_BF16 here")
    rng = np.random.default_rng(5)
    for amx in (True, False):
        kn = bf16_kernels(monkeypatch, amx=amx)
        tiles = amx and amx_cpu
        assert (kn.bf16_attention is not None) is (tiles or dp_cpu)
        assert ("amx_attention" in kn.routes) is tiles and ("dpbf16_attention" in kn.routes) is dp_cpu
        for d, bf16_ok, rounded in ((72, True, tiles or dp_cpu), (72, False, False), (128, True, dp_cpu)):
            q, k, v = (rng.standard_normal((1, 4, n, d)).astype(np.float32) for n in (40, 90, 90))
            scale = d ** -0.5
            want_rounded, want_exact = reference(q, k, v, scale), exact(q, k, v, scale)
            top = np.abs(want_exact).max()
            for got in (K.attention(kn, Tensor(q), Tensor(k), Tensor(v), None, scale, bf16_ok=bf16_ok).asnumpy(),
                        K.attention_rows(kn, Tensor(q), Tensor(k), Tensor(v), scale, bf16_ok=bf16_ok).asnumpy()
                        .reshape(1, 40, 4, d).transpose(0, 2, 1, 3)):
                if rounded:
                    assert np.abs(got - want_rounded).max() <= 2e-3 * top
                    assert np.abs(got - want_exact).max() > 1e-4 * top  # rounded, not the fp32 kernel
                else:
                    assert np.abs(got - want_exact).max() <= 1e-5 * top
