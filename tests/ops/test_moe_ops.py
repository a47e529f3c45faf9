"""MoE dispatch kernels (ms_ocr/ops/moe.py): the composed fallbacks compute what MoeTokenPermute, GroupedMatmul
and MoeTokenUnpermute are documented to compute (numpy models of the documentation, the documented example),
and the fused branch, with the Ascend operators replaced by those models under their installed signatures,
gives the routed expert FFN of a numpy reference."""

import inspect

import mindspore as ms
import mindspore.ops.auto_generate as ag
import numpy as np
import pytest
from mindspore import Tensor, ops

from ms_ocr import ops as K
from ms_ocr.nn.moe import MoE, route
from ms_ocr.ops import bind
from ms_ocr.ops.kernels import COMPOSED, FUSED
from ms_ocr.ops import moe as moe_mod


def np_permute(tokens, ids):
    """MoeTokenPermute: pairs t*k + j stably sorted by expert; second output = each pair's permuted row."""
    ids = ids.reshape(len(tokens), -1)
    k = ids.shape[1]
    order = np.argsort(ids.reshape(-1), kind="stable")
    rows = np.empty_like(order)
    rows[order] = np.arange(len(order))
    return tokens[order // k], rows.astype(np.int32)


def np_grouped_matmul(x, w, ends, transpose_b):
    """GroupedMatmul, split_item 3 / group_type 0: rows [ends[e-1], ends[e]) times weight[e]."""
    out, start = [], 0
    for e, end in enumerate(ends):
        we = w[e].T if transpose_b else w[e]
        out.append(x[start:end] @ we)
        start = end
    return np.concatenate(out, 0)


def np_unpermute(permuted, rows, probs):
    t, k = probs.shape
    return (permuted[rows].reshape(t, k, -1) * probs[..., None]).sum(1)


def test_permute_fallback_gives_the_documented_example():
    tokens = np.array([[1, 1, 1], [7, 7, 7], [2, 2, 2], [1, 1, 1], [2, 2, 2], [3, 3, 3]], np.float32)
    ids = np.array([5, 0, 3, 1, 2, 4], np.int32)[:, None]
    permuted, rows = K.token_permute(COMPOSED, Tensor(tokens), Tensor(ids))
    assert permuted.asnumpy()[:, 0].tolist() == [7, 1, 2, 2, 3, 1]  # the MindSpore documentation's output
    assert rows.asnumpy().tolist() == [5, 0, 3, 1, 2, 4]


def test_fallbacks_match_the_documented_semantics():
    rng = np.random.default_rng(0)
    t, k, e, h, n = 11, 3, 5, 8, 6
    tokens = rng.standard_normal((t, h)).astype(np.float32)
    ids = np.stack([rng.choice(e, k, replace=False) for _ in range(t)]).astype(np.int32)
    probs = rng.random((t, k)).astype(np.float32)
    w = rng.standard_normal((e, n, h)).astype(np.float32)
    permuted, rows = K.token_permute(COMPOSED, Tensor(tokens), Tensor(ids))
    want_p, want_rows = np_permute(tokens, ids)
    np.testing.assert_array_equal(permuted.asnumpy(), want_p)
    np.testing.assert_array_equal(rows.asnumpy(), want_rows)
    ends = K.expert_ends(Tensor(ids), e).asnumpy()
    np.testing.assert_array_equal(ends, np.cumsum(np.bincount(ids.reshape(-1), minlength=e)))
    y = K.grouped_matmul(COMPOSED, permuted, Tensor(w), Tensor(ends)).asnumpy()
    np.testing.assert_allclose(y, np_grouped_matmul(want_p, w, ends, True), rtol=1e-5, atol=1e-5)
    out = K.token_unpermute(COMPOSED, Tensor(y), rows, Tensor(probs)).asnumpy()
    np.testing.assert_allclose(out, np_unpermute(y, want_rows, probs), rtol=1e-5, atol=1e-5)


def _reference_routed(x, weights, ids, gate, up, down):
    out = np.zeros_like(x)
    for t in range(len(x)):
        for j, e in enumerate(ids[t]):
            g, u = gate[e] @ x[t], up[e] @ x[t]
            out[t] += weights[t, j] * (down[e] @ (g / (1 + np.exp(-g)) * u))
    return out


@pytest.mark.parametrize("fused", [False, True])
def test_routed_experts_fallback_and_fused_branch(fused, monkeypatch):
    rng = np.random.default_rng(1)
    hidden, inter, experts, top_k = 16, 8, 6, 2
    moe = MoE(hidden, inter, experts, top_k, 1)
    for p, shape in ((moe.gate.weight, (experts, hidden)), (moe.experts.gate_proj, (experts, inter, hidden)),
                     (moe.experts.up_proj, (experts, inter, hidden)), (moe.experts.down_proj, (experts, hidden, inter))):
        p.set_data(Tensor(rng.standard_normal(shape).astype(np.float32) * 0.3))
    x = rng.standard_normal((9, hidden)).astype(np.float32)
    weights, ids = route(COMPOSED, Tensor(x), moe.gate.weight, top_k, 1.0)
    want = _reference_routed(x, weights.asnumpy(), ids.asnumpy(), moe.experts.gate_proj.asnumpy(),
                             moe.experts.up_proj.asnumpy(), moe.experts.down_proj.asnumpy())
    calls = []
    if fused:
        def bound(fn, name):
            sig = inspect.signature(fn)

            def fake(*args, **kwargs):
                a = sig.bind(*args, **kwargs).arguments  # raises if the call does not fit the installed op
                calls.append(name)
                arr = {key: (v.asnumpy() if isinstance(v, Tensor) else v) for key, v in a.items()}
                if name == "permute":
                    p, r = np_permute(arr["tokens"], arr["indices"])
                    return Tensor(p), Tensor(r)
                if name == "gmm":
                    assert (a["split_item"], a["group_type"], a["transpose_b"]) == (3, 0, True)
                    assert a["group_list"].dtype == ms.int64
                    return [Tensor(np_grouped_matmul(arr["x"][0].asnumpy(), arr["weight"][0].asnumpy(),
                                                     arr["group_list"], True))]
                return Tensor(np_unpermute(arr["permuted_tokens"], arr["sorted_indices"], arr["probs"]))
            return fake
        monkeypatch.setattr(moe_mod.ops, "moe_token_permute", bound(ops.moe_token_permute, "permute"))
        monkeypatch.setattr(ag, "grouped_matmul", bound(ag.grouped_matmul, "gmm"))
        monkeypatch.setattr(moe_mod.ops, "moe_token_unpermute", bound(ops.moe_token_unpermute, "unpermute"))
    bind(moe, FUSED if fused else COMPOSED)
    got = moe.routed_experts(Tensor(x), weights, ids).asnumpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if fused:
        assert calls == ["permute", "gmm", "gmm", "gmm", "unpermute"]
