"""Fallback kernels vs NumPy implementations of what the fused Ascend ops are documented to compute, and
the fused branches called with the real signatures (ops mocked, since Ascend kernels do not run on CPU)."""

import importlib
import inspect

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, ops

from ms_ocr import ops as K
from ms_ocr.ops.kernels import FUSED, choose
from ms_ocr.ops import norm as norm_mod
from ms_ocr.ops import rope as rope_mod

att_mod = importlib.import_module("ms_ocr.ops.attention")  # the package re-exports a function of that name


@pytest.fixture(autouse=True)
def pynative():
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    yield
    ms.set_context(mode=mode)  # later modules run the compiled steps in graph mode


@pytest.fixture(scope="module")
def kn():
    """The CPU's kernels, as a process on this machine chooses them."""
    return choose("CPU")


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_flash_attention(query, key, value, head_num, attn_mask=None, scalar_value=1.0, input_layout="BSH", **_):
    """FlashAttentionScore, BNSD layout: softmax(q k^T * scale, masked where attn_mask == 1) v; GQA by
    sharing kv head n // (N1 / N2)."""
    assert input_layout == "BNSD" and head_num == query.shape[1]
    q, k, v = query, key, value
    rep = q.shape[1] // k.shape[1]
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    s = np.einsum("bnsd,bntd->bnst", q, k) * scalar_value
    if attn_mask is not None:
        s = np.where(attn_mask.astype(bool), -np.inf, s)
    return np.einsum("bnst,bntd->bnsd", np_softmax(s), v)


def np_rope(x, cos, sin):
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def np_rms_norm(x, g, eps):
    return g * x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def make_qkv(rng, b=2, hq=8, hkv=2, s=5, t=7, d=16):
    q = rng.standard_normal((b, hq, s, d)).astype(np.float32)
    k = rng.standard_normal((b, hkv, t, d)).astype(np.float32)
    v = rng.standard_normal((b, hkv, t, d)).astype(np.float32)
    visible = rng.random((b, 1, s, t)) > 0.3
    visible[..., 0] = True  # every query sees at least one key
    return q, k, v, visible


@pytest.mark.parametrize("hq,hkv", [(8, 2), (4, 4), (6, 1)])
def test_composed_attention_matches_reference(hq, hkv, kn):
    rng = np.random.default_rng(0)
    q, k, v, visible = make_qkv(rng, hq=hq, hkv=hkv)
    mask = K.attention_mask(kn, Tensor(visible))
    got = K.attention(kn, Tensor(q), Tensor(k), Tensor(v), mask, 0.25).asnumpy()
    want = np_flash_attention(q, k, v, hq, attn_mask=~visible, scalar_value=0.25, input_layout="BNSD")
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 1e-5


@pytest.mark.parametrize("hq,hkv", [(8, 2), (4, 4)])
def test_attention_with_new_key_equals_attention_over_the_written_cache(hq, hkv, kn):
    """One new token over a cache it does not write == attention over the cache with the token's k/v written
    at its slot and the slots up to it visible (what the in-graph scatter_update decode computes)."""
    rng = np.random.default_rng(3)
    q, k, v, _ = make_qkv(rng, hq=hq, hkv=hkv, s=1, t=9)
    k_new, v_new = k[:, :, :1] * 2.0, v[:, :, :1] - 1.0
    pos = np.array([4, 8])  # per sequence; the last one's own slot is the cache's last
    visible = np.arange(9)[None, :] < pos[:, None]  # the slots before the token's own
    got = K.attention_with_new(kn, Tensor(q), Tensor(k), Tensor(v), Tensor(k_new), Tensor(v_new),
                               K.attention_mask(kn, Tensor(visible[:, None, None])), 0.25).asnumpy()
    k_written, v_written = k.copy(), v.copy()
    for b, p in enumerate(pos):
        k_written[b, :, p], v_written[b, :, p] = k_new[b, :, 0], v_new[b, :, 0]
    want = np_flash_attention(q, k_written, v_written, hq, attn_mask=~(np.arange(9)[None, :] <= pos[:, None])[
        :, None, None], scalar_value=0.25, input_layout="BNSD")
    assert got.shape == want.shape == (2, hq, 1, 16)
    assert np.abs(got - want).max() < 1e-5


@pytest.mark.parametrize("hq,hkv", [(8, 2), (4, 4)])
def test_attention_with_new_over_a_bf16_cache(hq, hkv, kn):
    """--kv-cache-dtype bf16 on the composed path (a MoE decoder's layers, more than 8 sequences): the same as over
    an fp32 cache holding the bf16 values, with the token's own k/v rounded to bf16 as the cache will hold them."""
    import mindspore as ms
    from ms_ocr.convert.loader import round_to_bf16
    rng = np.random.default_rng(4)
    q, k, v, _ = make_qkv(rng, hq=hq, hkv=hkv, s=1, t=9)
    k, v = round_to_bf16(k), round_to_bf16(v)
    k_new, v_new = k[:, :, :1] * 1.37, v[:, :, :1] - 0.61  # not bf16 values
    mask = K.attention_mask(kn, Tensor((np.arange(9)[None, :] < np.array([4, 8])[:, None])[:, None, None]))
    got = K.attention_with_new(kn, Tensor(q), Tensor(k).astype(ms.bfloat16), Tensor(v).astype(ms.bfloat16),
                               Tensor(k_new), Tensor(v_new), mask, 0.25).asnumpy()
    want = K.attention_with_new(kn, Tensor(q), Tensor(k), Tensor(v), Tensor(round_to_bf16(k_new)),
                                Tensor(round_to_bf16(v_new)), mask, 0.25).asnumpy()
    unrounded = K.attention_with_new(kn, Tensor(q), Tensor(k), Tensor(v), Tensor(k_new), Tensor(v_new), mask,
                                     0.25).asnumpy()
    assert np.abs(got - want).max() < 1e-6 < np.abs(got - unrounded).max()


def test_composed_attention_causal_mask_excludes_future(kn):
    rng = np.random.default_rng(1)
    q, k, v, _ = make_qkv(rng, b=1, hq=2, hkv=1, s=4, t=4)
    visible = np.tril(np.ones((4, 4), bool))[None, None]
    got = K.attention(kn, Tensor(q), Tensor(k), Tensor(v), K.attention_mask(kn, Tensor(visible)), 1.0).asnumpy()
    # the first query sees only key 0, so its output is exactly v[0]
    np.testing.assert_allclose(got[0, :, 0], np.repeat(v[0, :, 0], 2, 0), rtol=0, atol=1e-6)


def test_fused_attention_branch_builds_valid_call(monkeypatch, kn):
    rng = np.random.default_rng(2)
    q, k, v, visible = make_qkv(rng)
    real_sig = inspect.signature(ops.flash_attention_score)
    calls = []

    def fake(*args, **kwargs):
        bound = real_sig.bind(*args, **kwargs)  # raises if the call does not fit the installed op
        calls.append(bound.arguments)
        a = {k2: (v2.asnumpy() if isinstance(v2, Tensor) else v2) for k2, v2 in bound.arguments.items()}
        return Tensor(np_flash_attention(**a).astype(np.float32))

    monkeypatch.setattr(att_mod.ops, "flash_attention_score", fake)
    mask = K.attention_mask(FUSED, Tensor(visible))
    assert mask.dtype == ms.uint8  # FlashAttentionScore takes 1 = discard
    got = K.attention(FUSED, Tensor(q), Tensor(k), Tensor(v), mask, 0.25).asnumpy()
    want = K.attention(kn, Tensor(q), Tensor(k), Tensor(v), K.attention_mask(kn, Tensor(visible)), 0.25).asnumpy()
    assert calls and calls[0]["input_layout"] == "BNSD" and calls[0]["head_num"] == 8
    assert np.abs(got - want).max() < 1e-5


def test_rope_fallback_and_fused_branch(monkeypatch, kn):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 6, 8)).astype(np.float32)
    ang = rng.standard_normal((1, 1, 6, 4)).astype(np.float32)
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    want = np_rope(x, cos, sin)
    got = K.apply_rope(kn, Tensor(x), Tensor(cos), Tensor(sin)).asnumpy()
    assert np.abs(got - want).max() < 1e-6
    sig = inspect.signature(ops.rotary_position_embedding)

    def fake(*args, **kwargs):
        a = sig.bind(*args, **kwargs).arguments
        assert a["mode"] == 0  # rotate-half layout
        return Tensor(np_rope(a["x"].asnumpy(), a["cos"].asnumpy(), a["sin"].asnumpy()))

    monkeypatch.setattr(rope_mod.ops, "rotary_position_embedding", fake)
    fused = K.apply_rope(FUSED, Tensor(x), Tensor(cos), Tensor(sin)).asnumpy()
    assert np.abs(fused - want).max() < 1e-6


@pytest.mark.parametrize("paired", [True, False])
def test_rope_short_sequence_form_is_bit_identical(paired, kn):
    # decode-shaped input (one position per sequence) takes the swap-halves + signed-sin form; it must give
    # exactly the bits of the long-sequence forms (same products, negation moved onto the table)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 1, 8)).astype(np.float32)
    ang = rng.standard_normal((2, 1, 1, 4 if paired else 8)).astype(np.float32)
    ang = np.concatenate([ang, ang], -1) if paired else ang
    cos, sin = np.cos(ang), np.sin(ang)
    short = K.apply_rope(kn, Tensor(x), Tensor(cos), Tensor(sin), paired).asnumpy()
    long_x = np.concatenate([x] * (rope_mod.SHORT_SEQ + 1), 2)
    long_t = [np.concatenate([t] * (rope_mod.SHORT_SEQ + 1), 2) for t in (cos, sin)]
    long = K.apply_rope(kn, Tensor(long_x), Tensor(long_t[0]), Tensor(long_t[1]), paired).asnumpy()[:, :, :1]
    assert np.array_equal(short, long)
    assert np.abs(short - np_rope(x, cos, sin)).max() < 1e-6


def test_rope_unpaired_tables_use_the_general_formula(kn):
    # XD-RoPE tables: the two halves of a rotation pair carry different angles.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 6, 8)).astype(np.float32)
    ang = rng.standard_normal((1, 1, 6, 8)).astype(np.float32)
    cos, sin = np.cos(ang), np.sin(ang)
    got = K.apply_rope(kn, Tensor(x), Tensor(cos), Tensor(sin), paired=False).asnumpy()
    assert np.abs(got - np_rope(x, cos, sin)).max() < 1e-6
    # the paired shortcut would be wrong here, so the flag matters
    assert np.abs(K.apply_rope(kn, Tensor(x), Tensor(cos), Tensor(sin)).asnumpy() - np_rope(x, cos, sin)).max() > 1e-2


def test_rms_norm_fallback_and_fused_branch(monkeypatch, kn):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 5, 32)).astype(np.float32) * 3
    g = rng.standard_normal(32).astype(np.float32)
    want = np_rms_norm(x, g, 1e-5)
    got = K.rms_norm(kn, Tensor(x), Tensor(g), 1e-5).asnumpy()
    assert np.abs(got - want).max() < 1e-5
    sig = inspect.signature(ops.rms_norm)

    def fake(*args, **kwargs):
        a = sig.bind(*args, **kwargs).arguments
        y = np_rms_norm(a["x"].asnumpy(), a["gamma"].asnumpy(), a["epsilon"])
        return Tensor(y.astype(np.float32)), Tensor(np.zeros((1,), np.float32))  # (y, rstd)

    monkeypatch.setattr(norm_mod.ops, "rms_norm", fake)
    fused = K.rms_norm(FUSED, Tensor(x), Tensor(g), 1e-5).asnumpy()
    assert np.abs(fused - want).max() < 1e-5


def test_layer_norm_operator_and_portable_forms(monkeypatch, kn):
    real, made = ops.LayerNorm, []

    def spy(*args):
        made.append(args)
        return real(*args)

    monkeypatch.setattr(norm_mod.ops, "LayerNorm", spy)
    rng = np.random.default_rng(5)
    # rows with large offsets: a one-pass variance would lose digits here
    x = (rng.standard_normal((7, 48)) * 3 + rng.standard_normal((7, 1)) * 50).astype(np.float32)
    w, b = rng.standard_normal(48).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    xd = x.astype(np.float64)
    want = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-6) * w + b
    # without the CPU's native LayerNormRows where routed (tests/ops/test_vit_epilogues.py)
    got = K.layer_norm(kn.without_native(), Tensor(x), Tensor(w), Tensor(b), 1e-6).asnumpy()
    assert np.abs(got - want).max() < 1e-4 and made == [(-1, -1, 1e-6)]  # the operator, over the last axis
    portable = K.layer_norm(kn.for_onnx(), Tensor(x), Tensor(w), Tensor(b), 1e-6).asnumpy()
    assert np.abs(portable - want).max() < 1e-4 and len(made) == 1  # composed: no operator for ONNX


def test_activations_match_formulas(kn):
    x = np.concatenate([np.linspace(-8, 8, 2001), [-40.0, -12.0, -1e-6, 0.0, 1e-6, 12.0, 40.0]]).astype(np.float32)
    from math import erf, pi, sqrt, tanh
    gelu_tanh = np.array([0.5 * v * (1 + tanh(sqrt(2 / pi) * (v + 0.044715 * v ** 3))) for v in x.astype(np.float64)])
    gelu_erf = np.array([0.5 * v * (1 + erf(v / sqrt(2))) for v in x.astype(np.float64)])
    assert np.abs(K.gelu_tanh(kn, Tensor(x)).asnumpy() - gelu_tanh).max() < 2e-6
    assert np.abs(K.gelu_erf(kn, Tensor(x)).asnumpy() - gelu_erf).max() < 2e-6
    assert np.abs(K.silu(kn, Tensor(x)).asnumpy() - x / (1 + np.exp(-x.astype(np.float64)))).max() < 2e-6


def test_the_kernels_follow_the_target(kn):
    assert choose("Ascend").fused is True and choose("Ascend").library is None
    assert kn.fused is False
