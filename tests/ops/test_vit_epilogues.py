"""The element-wise work around a ViT layer's products, fused into native kernels (ms_ocr/ops/native):
ViTHeads (the q/k/v bias adds, head transposes and rope in one pass), VisionAttentionRows (attention written in
the rows layout the out projection reads) and GemmBf16's epilogues (bias, GELU, residual on each thread's slice of
a bf16 product). What each is documented to compute, against NumPy and against the composed MindSpore path it
replaces; then their routing."""

import math

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

from ms_ocr import ops as K
from ms_ocr.convert.loader import round_to_bf16
from ms_ocr.ops import custom, native
from ms_ocr.ops import kernels as routes
from ms_ocr.ops.activation import gelu_erf, gelu_tanh
from tests.helpers.native import build_kernels, needs_compiler
from tests.ops.test_gemm_bf16 import needs_dnnl, rne_bf16
from tests.ops.test_vision_attention import reference as attention_reference


def _rope_tables(rng, n, d, paired):
    """cos, sin [1, 1, n, d] of angles per (row, dim): paired tables repeat their first half (HF's 1D/2D rope)."""
    ang = rng.uniform(-3, 3, (n, d // 2 if paired else d))
    if paired:
        ang = np.concatenate([ang, ang], -1)
    return (np.cos(ang).astype(np.float32)[None, None], np.sin(ang).astype(np.float32)[None, None])


def _heads_case(rng, n, heads, d, paired=True):
    c = heads * d
    ys = [rng.standard_normal((n, c)).astype(np.float32) for _ in range(3)]
    bs = [rng.standard_normal(c).astype(np.float32) for _ in range(3)]
    return ys, bs, _rope_tables(rng, n, d, paired)


def _heads_reference(ys, bs, cos, sin, heads):
    """float64: t = y + b heads-first; q, k = t cos + rotate_half(t) sin; v = t."""
    n, c = ys[0].shape
    d = c // heads
    out = []
    for i, (y, b) in enumerate(zip(ys, bs)):
        t = (y.astype(np.float64) + b).reshape(n, heads, d).transpose(1, 0, 2)[None]
        if i < 2:
            rot = np.concatenate([-t[..., d // 2:], t[..., :d // 2]], -1)
            t = t * cos.astype(np.float64) + rot * sin.astype(np.float64)
        out.append(t)
    return out


CASES = [(37, 3, 8), (64, 16, 72), (5, 2, 16)]  # rows, heads, head_dim (PaddleOCR-VL's tower: 16 x 72)


@needs_compiler
def test_vit_heads_computes_the_documented_formula_at_every_isa_level(pynative_cpu, isa_kernels):
    """Any tables (paired or not): q and k rotated by the general formula, v only biased, all [1, H, N, D]."""
    op = custom.native_ops(isa_kernels)[6]
    for n, heads, d in CASES:
        for paired in (True, False):
            ys, bs, (cos, sin) = _heads_case(np.random.default_rng(n + d), n, heads, d, paired)
            got = op(*[Tensor(a) for a in ys + bs], Tensor(cos), Tensor(sin))
            want = _heads_reference(ys, bs, cos, sin, heads)
            for g, w in zip(got, want):
                assert g.shape == (1, heads, n, d)
                assert np.abs(g.asnumpy() - w).max() <= 1e-6 * np.abs(w).max(), (isa_kernels.isa_level, n, paired)


@needs_compiler
def test_vit_heads_refuses_tables_it_would_misread(pynative_cpu):
    """Rope tables with a leading axis > 1 (or of another row count) are an error, not the first table read."""
    op = custom.native_ops(build_kernels("native"))[6]
    ys, bs, (cos, sin) = _heads_case(np.random.default_rng(1), 4, 2, 8)
    args = [Tensor(a) for a in ys + bs]
    for bad in (np.concatenate([cos, cos]), cos[:, :, :3]):
        with pytest.raises(RuntimeError, match="ViTHeads"):
            op(*args, Tensor(bad), Tensor(bad))[0].asnumpy()
    assert op(*args, Tensor(cos), Tensor(sin))[0].shape == (1, 2, 4, 8)


@needs_compiler
def test_vit_heads_is_the_composed_path_bit_for_bit(pynative_cpu, monkeypatch):
    """With paired tables (what the ViT layers pass) the kernel gives the composed ops' bits: each sum and product
    rounded once, no fused multiply-adds."""
    monkeypatch.setenv(routes.ROUTES_ENV, "all")
    kn = routes.choose("CPU")
    assert kn.vit_heads is not None
    for n, heads, d in CASES:
        ys, bs, (cos, sin) = _heads_case(np.random.default_rng(7 * n), n, heads, d)
        args = [Tensor(a) for a in ys + bs] + [Tensor(cos), Tensor(sin), heads]
        native_out = [t.asnumpy() for t in K.vit_heads(kn, *args)]
        composed = [t.asnumpy() for t in K.vit_heads(kn.without_native(), *args)]
        for a, b in zip(native_out, composed):
            assert a.shape == b.shape and np.array_equal(a, b)
        # and the composed path is not trivially the same op: the products do round
        assert np.abs(native_out[0] - _heads_reference(ys, bs, cos, sin, heads)[0]).max() > 0


@needs_compiler
def test_attention_rows_is_attention_with_heads_moved_behind_rows(pynative_cpu, isa_kernels):
    rows_op = custom.attention_rows_op(isa_kernels)
    heads_op = custom.native_ops(isa_kernels)[2]
    rng = np.random.default_rng(11)
    for b, h, s, t, d in [(1, 16, 70, 70, 72), (2, 3, 33, 40, 8)]:
        shapes = ((b, h, s, d), (b, h, t, d), (b, h, t, d))
        q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in shapes)
        scale = Tensor(np.array([d ** -0.5], np.float32))
        got = rows_op(Tensor(q), Tensor(k), Tensor(v), scale).asnumpy()
        heads_first = heads_op(Tensor(q), Tensor(k), Tensor(v), scale).asnumpy()
        assert got.shape == (b, s, h * d)
        assert np.array_equal(got, heads_first.transpose(0, 2, 1, 3).reshape(b, s, h * d))
        ref = attention_reference(q, k, v, d ** -0.5).transpose(0, 2, 1, 3).reshape(b, s, h * d)
        assert np.abs(got - ref).max() <= 2e-6 * max(1.0, np.abs(ref).max())


def _gelu(x, erf_form):
    x = x.astype(np.float64)
    if erf_form:
        return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


@pytest.fixture(scope="module")
def dnnl_kernels():
    k = build_kernels("native")
    assert k.load_dnnl()
    return k


@needs_compiler
@needs_dnnl
@pytest.mark.parametrize("m,k,n", [(300, 64, 70), (40, 96, 700)])  # sliced by rows, by columns
def test_gemm_bf16_epilogues(m, k, n, dnnl_kernels, pynative_cpu):
    """Each variant is GemmBf16's product followed by its epilogue: + b, then GELU (erf / tanh) or res + (...)."""
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = Tensor(round_to_bf16(rng.standard_normal((n, k)) * 0.2)).astype(ms.bfloat16)
    b = rng.standard_normal(n).astype(np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32)
    plain = custom.bf16_gemm_op(dnnl_kernels)(Tensor(x), w).asnumpy()
    ep = custom.bf16_epilogue_ops(dnnl_kernels)
    before = dnnl_kernels.gemm_bf16_calls
    biased = ep["bias"](Tensor(x), w, Tensor(b)).asnumpy()
    assert np.array_equal(biased, plain + b)
    assert np.array_equal(ep["residual"](Tensor(x), w, Tensor(b), Tensor(res)).asnumpy(), res + (plain + b))
    for role, erf_form in (("gelu_erf", True), ("gelu_tanh", False)):
        got = ep[role](Tensor(x), w, Tensor(b)).asnumpy()
        want = _gelu(plain + b, erf_form)
        assert np.abs(got - want).max() <= 2e-6 * np.abs(want).max(), role
    assert dnnl_kernels.gemm_bf16_calls == before + 4
    # the product itself is bf16 x bf16 summed in fp32 (GemmBf16's contract)
    want = rne_bf16(x).astype(np.float64) @ w.astype(ms.float32).asnumpy().T.astype(np.float64) + b
    assert np.abs(biased - want).max() <= 2e-6 * np.sqrt(k) * np.abs(want).max()


@needs_compiler
@needs_dnnl
def test_linear_bias_routes_bf16_products_through_one_epilogue_op(pynative_cpu, monkeypatch):
    """With products in bf16 on, linear_bias over many rows and a bf16 matrix is one GemmBf16 variant and equals
    the composed sum (GemmBf16, + b, GELU, + residual); a decode step's rows, an fp32 matrix and an activation
    without an epilogue take the composed ops."""
    if not native.cpu_bf16_dot():
        monkeypatch.setattr(native, "cpu_bf16_dot", lambda: True)
    assert routes.bf16_products_refused("CPU", pynative_cpu) is None
    kn = routes.with_bf16_products(pynative_cpu)
    assert kn.gemm_bf16_bias is not None
    kernels = native.load()
    rng = np.random.default_rng(3)
    w = Tensor(round_to_bf16(rng.standard_normal((96, 64)) * 0.2)).astype(ms.bfloat16)
    b = Tensor(rng.standard_normal(96).astype(np.float32))
    x = Tensor(rng.standard_normal((20, 64)).astype(np.float32))
    res = Tensor(rng.standard_normal((20, 96)).astype(np.float32))
    plain = K.matmul_t(kn, x, w).asnumpy()
    before = kernels.gemm_bf16_calls
    got = K.linear_bias(kn, x, w, b, act=gelu_erf, act_role=K.epilogue_role(gelu_erf)).asnumpy()
    assert kernels.gemm_bf16_calls == before + 1
    want = gelu_erf(kn, Tensor(plain) + b).asnumpy()
    assert np.abs(got - want).max() <= 2e-6 * np.abs(want).max()
    assert np.array_equal(K.linear_bias(kn, x, w, b, residual=res).asnumpy(), res.asnumpy() + (plain + b.asnumpy()))
    assert kernels.gemm_bf16_calls == before + 2
    assert K.epilogue_role(gelu_tanh) == "gelu_tanh" and K.epilogue_role(K.silu) is None
    K.linear_bias(kn, x, w, b, act=K.silu)  # no epilogue for SiLU: GemmBf16, then the composed bias add and SiLU
    assert kernels.gemm_bf16_calls == before + 3
    K.linear_bias(kn, x[:4], w, b)  # a decode step's rows
    K.linear_bias(kn, x, w.astype(ms.float32), b)  # an fp32 matrix
    assert kernels.gemm_bf16_calls == before + 3


@needs_compiler
def test_layer_norm_rows_at_every_isa_level(pynative_cpu, isa_kernels):
    """(x - mean) / sqrt(var + eps) * w + b per row, against float64 NumPy; rows of a width that is not a multiple
    of any vector width, and rows with a large common offset (the two-pass variance keeps its error at the size of
    the mean's fp32 rounding; a one-pass E[x^2] - mean^2 would lose the variance there)."""
    op = custom.native_ops(isa_kernels)[7]
    rng = np.random.default_rng(5)
    for shape, offset in (((37, 1152), 0.0), ((2, 9, 77), 0.0), ((16, 72), 300.0)):
        c = shape[-1]
        x = (rng.standard_normal(shape) * 3 + offset).astype(np.float32)
        w, b = (1 + 0.1 * rng.standard_normal(c)).astype(np.float32), rng.standard_normal(c).astype(np.float32)
        got = op(Tensor(x), Tensor(w), Tensor(b), Tensor(np.array([1e-6], np.float32))).asnumpy()
        xd = x.astype(np.float64)
        mean = xd.mean(-1, keepdims=True)
        want = (xd - mean) / np.sqrt(((xd - mean) ** 2).mean(-1, keepdims=True) + 1e-6) * w + b
        tol = 4e-6 if offset == 0 else 3e-5
        assert got.shape == shape and np.abs(got - want).max() <= tol * np.abs(want).max(), (isa_kernels.isa_level,
                                                                                                shape)


@needs_compiler
def test_layer_norm_routes_fp32_to_the_kernel(pynative_cpu, monkeypatch):
    """Routed, K.layer_norm of fp32 tensors is the kernel and agrees with MindSpore's LayerNorm (the unrouted path);
    graphs built for export (without_native) keep MindSpore's."""
    monkeypatch.setenv(routes.ROUTES_ENV, "all")
    kn = routes.choose("CPU")
    assert kn.layer_norm is not None
    rng = np.random.default_rng(8)
    x, w, b = (Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((64, 1152), (1152,), (1152,)))
    native_out = K.layer_norm(kn, x, w, b, 1e-6).asnumpy()
    assert kn.without_native().layer_norm is None
    mindspore_out = K.layer_norm(kn.without_native(), x, w, b, 1e-6).asnumpy()
    assert 0 < np.abs(native_out - mindspore_out).max() <= 2e-5 * np.abs(mindspore_out).max()



@needs_compiler
def test_rms_norm_rows_at_every_isa_level(pynative_cpu, isa_kernels):
    """w * x / sqrt(mean(x^2) + eps) per row, against float64 NumPy: a decoder's hidden rows, per-head q/k rows of
    128, and rows of a width that is not a multiple of any vector width."""
    op = custom.native_ops(isa_kernels)[8]
    rng = np.random.default_rng(6)
    for shape in ((37, 1024), (1, 16, 9, 128), (5, 77)):
        c = shape[-1]
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        w = (1 + 0.1 * rng.standard_normal(c)).astype(np.float32)
        got = op(Tensor(x), Tensor(w), Tensor(np.array([1e-6], np.float32))).asnumpy()
        xd = x.astype(np.float64)
        want = w * (xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-6))
        assert got.shape == shape and np.abs(got - want).max() <= 2e-6 * np.abs(want).max(), (isa_kernels.isa_level,
                                                                                                shape)


@needs_compiler
def test_rms_norm_routes_fp32_to_the_kernel(pynative_cpu, monkeypatch):
    """Routed, K.rms_norm of fp32 tensors is the kernel and agrees with the composed norm (the unrouted path, and
    graphs built for export); bf16 tensors keep the composed form."""
    monkeypatch.setenv(routes.ROUTES_ENV, "all")
    kn = routes.choose("CPU")
    assert kn.rms_norm is not None and kn.without_native().rms_norm is None
    rng = np.random.default_rng(9)
    x = Tensor(rng.standard_normal((64, 1024)).astype(np.float32))
    w = Tensor(rng.standard_normal(1024).astype(np.float32))
    native_out = K.rms_norm(kn, x, w, 1e-6).asnumpy()
    composed_out = K.rms_norm(kn.without_native(), x, w, 1e-6).asnumpy()
    assert 0 < np.abs(native_out - composed_out).max() <= 2e-6 * np.abs(composed_out).max()
