"""Scaled dot-product attention: Ascend FlashAttentionScore, on the CPU a native kernel for unmasked (vision)
attention, or a composed softmax attention."""

import numpy as np
import mindspore as ms
from mindspore import Tensor, ops

from ms_ocr.ops.linear import widen

# Large negative additive bias: exp(bias - max) is exactly 0 in fp32 and it never overflows to -inf.
NEG_BIAS = -3.0e38

_bmm_t = ops.BatchMatMul(transpose_b=True)
_bmm = ops.BatchMatMul()


def attention_mask(kn, visible):
    """Turn a boolean `visible` [B|1, 1, S, T] (True = may attend) into the form `attention` takes.

    Fused path: FlashAttentionScore's uint8 mask where 1 means "discard". Fallback: an fp32 additive
    bias (0 or NEG_BIAS). Build it once per forward and pass it to every layer.
    """
    if kn.fused:
        return ops.logical_not(visible).astype(ms.uint8)
    return ops.select(visible, ops.zeros_like(visible.astype(ms.float32)),
                      ops.full_like(visible.astype(ms.float32), NEG_BIAS))


def attention(kn, q, k, v, mask, scale, bf16_ok=False):
    """softmax(q k^T * scale + mask) v with grouped-query heads.

    q [B, Hq, S, D]; k, v [B, Hkv, T, D] with Hq a multiple of Hkv (head h reads kv head h // (Hq/Hkv));
    mask from `attention_mask`, broadcastable to [B, 1, S, T], or None when every key is visible.
    Returns [B, Hq, S, D]. `bf16_ok`: a VLM's vision encoder, which `--dtype bf16` may run in bf16 on the CPU's
    AMX tiles or AVX512_BF16 (_tiles_ok); other callers (the layout model) stay fp32 in every mode.
    """
    if kn.fused:
        return _attention_fused(q, k, v, mask, scale)
    if mask is None and _native_ok(kn, q, k, v):
        if bf16_ok and _tiles_ok(kn, q):
            return kn.bf16_attention[0](q, k, v, Tensor(np.array([scale], np.float32)))
        return kn.attention(q, k, v, Tensor(np.array([scale], np.float32)))
    return _attention_composed(q, k, v, mask, scale)


def attention_rows(kn, q, k, v, scale, bf16_ok=False):
    """Unmasked `attention` as rows: [B, S, Hq * D], head h's values of row i at [b, i, h * D:(h + 1) * D] (what an
    out projection reads). The native kernel writes that layout itself (VisionAttentionRows); elsewhere the heads
    are transposed after the attention. `bf16_ok`: as in `attention`."""
    b, hq, s, d = q.shape
    if not kn.fused and kn.attention_rows is not None and _native_ok(kn, q, k, v):
        if bf16_ok and _tiles_ok(kn, q):
            return kn.bf16_attention[1](q, k, v, Tensor(np.array([scale], np.float32)))
        return kn.attention_rows(q, k, v, Tensor(np.array([scale], np.float32)))
    return attention(kn, q, k, v, None, scale, bf16_ok).transpose(0, 2, 1, 3).reshape(b, s, hq * d)


# The native kernel (VisionAttention in ms_ocr/ops/native/attention.cc) serves unmasked fp32 attention with as many
# kv heads as query heads and head_dim a multiple of 8 up to 256: the vision encoders. It keeps each 32 query
# rows' scores in L2 instead of writing and re-reading the [H, S, T] scores and probabilities three times
# (BatchMatMul, Softmax, BatchMatMul): faster than the composed path, and than torch's SDPA, in its AVX-512 build;
# at AVX2 and SSE2 it measured slower than the composed path, and kernels.ROUTES leaves it out there.
def _kernel_takes(q, k, v):
    """What both native attention kernels read: 4-D fp32 q, k, v, head_dim a multiple of 8 up to 256."""
    ok = q.ndim == 4 and k.ndim == 4 and q.shape[-1] % 8 == 0 and q.shape[-1] <= 256
    return ok and q.dtype == ms.float32 and k.dtype == ms.float32 and v.dtype == ms.float32


def _native_ok(kn, q, k, v):
    return kn.attention is not None and _kernel_takes(q, k, v) and q.shape[1] == k.shape[1]


def _tiles_ok(kn, q):
    """--dtype bf16 on a CPU with AMX or AVX512_BF16 (kn.bf16_attention): the attention in bf16 (q and k
    rounded to bf16, the probabilities rounded to bf16 before they weight the values), head dims up to
    kn.bf16_attention_max_dim (96 on the tiles alone)."""
    return kn.bf16_attention is not None and q.shape[-1] <= kn.bf16_attention_max_dim


def native_causal_ok(kn, q, k, v):
    """Whether `causal_attention` serves q [B, Hq, S, D], k, v [B, Hkv, T, D] (CPU, native kernels routed, fp32,
    Hq a multiple of Hkv, T >= S, head_dim a multiple of 8 up to 256). Decided from shapes at compile time."""
    ok = kn.causal_attention is not None and _kernel_takes(q, k, v)
    return ok and q.shape[1] % k.shape[1] == 0 and k.shape[2] >= q.shape[2]


def causal_attention(kn, q, k, v, scale):
    """Causal softmax(q k^T * scale) v of the last S positions over T keys (query row i sees keys j <= T - S + i),
    grouped-query heads, by the native kernel (CausalAttention in ms_ocr/ops/native/attention.cc): no [S, T] scores
    are written, so a prefill graph keeps no score-sized buffers (a compiled CPU graph holds one buffer per
    intermediate, and the composed blocks' scores and probabilities grow with the prompt's square). Only where
    `native_causal_ok`; elsewhere nn.functional.causal_block_attention composes it."""
    return kn.causal_attention(q, k, v, Tensor(np.array([scale], np.float32)))


def _attention_fused(q, k, v, mask, scale):
    head_num = q.shape[1]
    out = ops.flash_attention_score(q, k, v, head_num, attn_mask=mask, scalar_value=scale,
                                    input_layout="BNSD")
    return out


def _attention_composed(q, k, v, mask, scale):
    b, hq, s, d = q.shape
    hkv, t = k.shape[1], k.shape[2]
    rep = hq // hkv
    # Group query heads by their kv head instead of repeating k/v: [B, Hq, S, D] -> [B, Hkv, rep*S, D].
    qg = q.reshape(b, hkv, rep * s, d)
    # scale q (small) rather than the [.., S, T] scores: one fewer score-sized tensor
    scores = _bmm_t((qg * scale).astype(ms.float32), k.astype(ms.float32))
    if mask is not None:
        scores = scores.reshape(b, hkv, rep, s, t) + mask.astype(ms.float32).reshape(mask.shape[0], 1, 1, s, t)
    probs = ops.softmax(scores, -1).reshape(b, hkv, rep * s, t).astype(v.dtype)
    out = _bmm(probs, v)
    return out.reshape(b, hq, s, d)


def attention_with_new(kn, q, k_cache, v_cache, k_new, v_new, mask, scale):
    """`attention` of one new token per sequence over its cache plus its own key/value, without writing them
    into the cache: softmax over [q k_cache^T + mask, q k_new] then the matching sum of values.

    q [B, Hq, 1, D]; k_cache, v_cache [B, Hkv, T, D] (read only); k_new, v_new [B, Hkv, 1, D]; mask from
    `attention_mask` over the T cache slots ([B|1, 1, 1, T]); the new key is always visible. Returns
    [B, Hq, 1, D]. Composed only: it serves the off-Ascend decode, whose caches the host writes (on CPU the
    in-graph scatter_update of a cache copies all of it). Caches in a narrower dtype than q (--kv-cache-dtype bf16
    with fp32 compute) are widened (the native WidenBf16 where loaded: MindSpore's CPU Cast from bf16 is a scalar
    kernel), and the token's own
    k, v rounded to that dtype first, as the cache will hold them (what the native DecodeLayer does). Widening
    copies the whole cache each step, so this path reads more with a bf16 cache than with an fp32 one.
    """
    b, hq, _, d = q.shape
    hkv, t = k_cache.shape[1], k_cache.shape[2]
    rep = hq // hkv
    if k_cache.dtype != q.dtype:
        k_new = k_new.astype(k_cache.dtype).astype(q.dtype)
        v_new = v_new.astype(v_cache.dtype).astype(q.dtype)
        k_cache, v_cache = widen(kn, k_cache, q.dtype), widen(kn, v_cache, q.dtype)
    qg = (q.reshape(b, hkv, rep, d) * scale).astype(ms.float32)
    scores = _bmm_t(qg, k_cache.astype(ms.float32)) + mask.astype(ms.float32).reshape(mask.shape[0], 1, 1, t)
    own = _bmm_t(qg, k_new.astype(ms.float32))  # [B, Hkv, rep, 1]
    probs = ops.softmax(ops.concat((scores, own), -1), -1)
    p_cache, p_own = ops.split(probs, (t, 1), -1)
    out = _bmm(p_cache.astype(v_cache.dtype), v_cache) + p_own.astype(v_new.dtype) * v_new
    return out.reshape(b, hq, 1, d)
