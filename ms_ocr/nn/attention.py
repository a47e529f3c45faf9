"""Attention Cells: causal GQA self-attention over a static KV cache, and bidirectional vision attention."""

import mindspore as ms
from mindspore import Parameter, nn, ops

from ms_ocr import ops as K
from ms_ocr.nn import functional as F
from ms_ocr.nn.layers import Linear, RMSNorm


class KVCacheAttention(nn.Cell):
    """Causal GQA self-attention whose keys/values live in per-layer static caches.

    Cache layout [B * Hkv * T, D]: one `scatter_update` writes rows (b*Hkv + h)*T + pos and a reshape reads
    [B, Hkv, T, D], so no per-step transpose of the cache (on CPU the reshape of the updated cache still runs
    as a copy). Queries attend over all T slots; the
    mask hides slots after each query's cache position (stale rows included).
    """

    def __init__(self, hidden, num_heads, num_kv_heads, head_dim, qk_norm=False, eps=1e-6, paired=True):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.q_proj = Linear(hidden, num_heads * head_dim, False)
        self.k_proj = Linear(hidden, num_kv_heads * head_dim, False)
        self.v_proj = Linear(hidden, num_kv_heads * head_dim, False)
        self.o_proj = Linear(num_heads * head_dim, hidden, False)
        self.qk_norm = qk_norm
        self.eps = eps
        self.paired = paired
        if qk_norm:  # per-head RMSNorm after rope (HunYuan's names)
            self.query_layernorm = RMSNorm(head_dim, eps)
            self.key_layernorm = RMSNorm(head_dim, eps)
        self.k_cache = Parameter(ops.zeros((num_kv_heads, head_dim), ms.float32), requires_grad=False)
        self.v_cache = Parameter(ops.zeros((num_kv_heads, head_dim), ms.float32), requires_grad=False)

    def allocate_cache(self, batch, slots, dtype, flat=True):
        """(Re)size the caches to `batch` sequences of `slots` positions, zero-filled: [B*Hkv*T, D] rows for
        `construct`'s in-graph writes (flat), or [B, Hkv, T, D] for the read-only decode steps
        (F.decoder_layer_decode), whose caches the host writes (a reshape of a cache Parameter in a CPU graph copies
        it). `dtype`: the caches' (set_data alone would convert the zeros to the Parameter's own
        dtype, so a bf16 cache asked of an fp32 Parameter stayed fp32)."""
        if flat:
            shape = (batch * self.num_kv_heads * slots, self.head_dim)
        else:
            shape = (batch, self.num_kv_heads, slots, self.head_dim)
        for cache in (self.k_cache, self.v_cache):
            if cache.dtype != dtype:
                cache.set_dtype(dtype)
            cache.set_data(ops.zeros(shape, dtype))

    def construct(self, x, cos, sin, write_idx, mask):
        b, s, _ = x.shape
        norms = None
        if self.qk_norm:
            norms = (self.query_layernorm.weight, self.key_layernorm.weight)
        kn = self.kernels
        q, k, v = F.project_qkv(kn, x, cos, sin, self.q_proj.weight, self.k_proj.weight, self.v_proj.weight,
                                self.num_heads, self.num_kv_heads, self.head_dim, norms, self.eps, self.paired)
        rows = b * self.num_kv_heads * s
        k_all = ops.scatter_update(self.k_cache, write_idx, k.reshape(rows, self.head_dim).astype(self.k_cache.dtype))
        v_all = ops.scatter_update(self.v_cache, write_idx, v.reshape(rows, self.head_dim).astype(self.v_cache.dtype))
        slots = k_all.shape[0] // (b * self.num_kv_heads)
        k_all = k_all.reshape(b, self.num_kv_heads, slots, self.head_dim)
        v_all = v_all.reshape(b, self.num_kv_heads, slots, self.head_dim)
        out = K.attention(kn, q, k_all.astype(q.dtype), v_all.astype(q.dtype), mask, self.head_dim ** -0.5)
        return F.linear(kn, F.merge_heads(out), self.o_proj.weight)


def cache_write_index(cache_pos, num_kv_heads, slots):
    """Rows of a [B*Hkv*T, D] cache written by tokens at `cache_pos` [B, S]: [B*Hkv*S] int32 in
    (b, head, s) order, matching k.reshape of a [B, Hkv, S, D] tensor."""
    b = cache_pos.shape[0]
    base = (ops.arange(b * num_kv_heads, dtype=ms.int32) * slots).reshape(b, num_kv_heads, 1)
    return (base + cache_pos.astype(ms.int32)[:, None, :]).reshape(-1)


def causal_cache_mask(kn, cache_pos, slot_ids):
    """Visible [B, 1, S, T]: slot t is visible to the token at cache position p iff slot_ids[t] <= p. slot_ids:
    arange(T) [T], or per sequence [B, T] (a windowed decoder's slot positions: nn/decoder.py)."""
    keys = slot_ids.astype(ms.int32)
    keys = keys[:, None, :] if keys.ndim == 2 else keys[None, None, :]
    visible = keys <= cache_pos.astype(ms.int32)[:, :, None]
    return K.attention_mask(kn, visible[:, None])


class VisionSelfAttention(nn.Cell):
    """Parameter holder for bidirectional vision attention (q/k/v + the out projection, stored as
    `out_name`: SigLIP out_proj, HunYuan o_proj); math in F.vit_attention_in / F.vit_out_mlp."""

    def __init__(self, dim, num_heads, bias=True, out_name="out_proj"):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = Linear(dim, dim, bias)
        self.k_proj = Linear(dim, dim, bias)
        self.v_proj = Linear(dim, dim, bias)
        setattr(self, out_name, Linear(dim, dim, bias))

