"""Attention Cells: causal GQA self-attention over a static KV cache, and bidirectional vision attention."""

import mindspore as ms
from mindspore import Parameter, nn, ops

from ms_ocr import ops as K
from ms_ocr.nn.layers import Linear


class KVCacheAttention(nn.Cell):
    """Causal GQA self-attention whose keys/values live in per-layer static caches.

    Cache layout [B * Hkv * T, D]: one `scatter_update` writes rows (b*Hkv + h)*T + pos and a free reshape
    reads [B, Hkv, T, D], so no per-step transpose of the cache. Queries attend over all T slots; the
    mask hides slots after each query's cache position (stale rows included).
    """

    def __init__(self, hidden, num_heads, num_kv_heads, head_dim, bias=False, o_bias=None):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = head_dim ** -0.5
        self.q_proj = Linear(hidden, num_heads * head_dim, bias)
        self.k_proj = Linear(hidden, num_kv_heads * head_dim, bias)
        self.v_proj = Linear(hidden, num_kv_heads * head_dim, bias)
        self.o_proj = Linear(num_heads * head_dim, hidden, bias if o_bias is None else o_bias)
        self.k_cache = Parameter(ops.zeros((num_kv_heads, head_dim), ms.float32), requires_grad=False)
        self.v_cache = Parameter(ops.zeros((num_kv_heads, head_dim), ms.float32), requires_grad=False)

    def allocate_cache(self, batch, slots, dtype):
        """(Re)size the caches to `batch` sequences of `slots` positions, zero-filled."""
        shape = (batch * self.num_kv_heads * slots, self.head_dim)
        self.k_cache.set_data(ops.zeros(shape, dtype))
        self.v_cache.set_data(ops.zeros(shape, dtype))

    def project_qkv(self, x, cos, sin):
        b, s, _ = x.shape
        # [B, S, H*D] -> [B, H, S, D]
        q = self.q_proj(x).reshape(b, s, self.num_heads, self.head_dim).transpose(0, 2, 1, 3)
        k = self.k_proj(x).reshape(b, s, self.num_kv_heads, self.head_dim).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(b, s, self.num_kv_heads, self.head_dim).transpose(0, 2, 1, 3)
        return K.apply_rope(q, cos, sin), K.apply_rope(k, cos, sin), v

    def construct(self, x, cos, sin, write_idx, mask):
        b, s, _ = x.shape
        q, k, v = self.project_qkv(x, cos, sin)
        rows = b * self.num_kv_heads * s
        k_all = ops.scatter_update(self.k_cache, write_idx, k.reshape(rows, self.head_dim).astype(self.k_cache.dtype))
        v_all = ops.scatter_update(self.v_cache, write_idx, v.reshape(rows, self.head_dim).astype(self.v_cache.dtype))
        slots = k_all.shape[0] // (b * self.num_kv_heads)
        k_all = k_all.reshape(b, self.num_kv_heads, slots, self.head_dim)
        v_all = v_all.reshape(b, self.num_kv_heads, slots, self.head_dim)
        out = K.attention(q, k_all.astype(q.dtype), v_all.astype(q.dtype), mask, self.scale)
        out = out.transpose(0, 2, 1, 3).reshape(b, s, self.num_heads * self.head_dim)
        return self.o_proj(out)


def cache_write_index(cache_pos, num_kv_heads, slots):
    """Rows of a [B*Hkv*T, D] cache written by tokens at `cache_pos` [B, S]: [B*Hkv*S] int32 in
    (b, head, s) order, matching k.reshape of a [B, Hkv, S, D] tensor."""
    b = cache_pos.shape[0]
    base = (ops.arange(b * num_kv_heads, dtype=ms.int32) * slots).reshape(b, num_kv_heads, 1)
    return (base + cache_pos.astype(ms.int32)[:, None, :]).reshape(-1)


def causal_cache_mask(cache_pos, slots):
    """Visible [B, 1, S, T]: slot t is visible to the token at cache position p iff t <= p."""
    t = ops.arange(slots, dtype=ms.int32)
    visible = t[None, None, :] <= cache_pos.astype(ms.int32)[:, :, None]
    return K.attention_mask(visible[:, None])


class VisionSelfAttention(nn.Cell):
    """Bidirectional multi-head attention for packed patch sequences (mask keeps images apart)."""

    def __init__(self, dim, num_heads, bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.q_proj = Linear(dim, dim, bias)
        self.k_proj = Linear(dim, dim, bias)
        self.v_proj = Linear(dim, dim, bias)
        self.out_proj = Linear(dim, dim, bias)

    def construct(self, x, cos, sin, mask):
        n = x.shape[0]
        # [N, C] -> [1, H, N, D]
        q = self.q_proj(x).reshape(n, self.num_heads, self.head_dim).transpose(1, 0, 2)[None]
        k = self.k_proj(x).reshape(n, self.num_heads, self.head_dim).transpose(1, 0, 2)[None]
        v = self.v_proj(x).reshape(n, self.num_heads, self.head_dim).transpose(1, 0, 2)[None]
        if cos is not None:
            q = K.apply_rope(q, cos, sin)
            k = K.apply_rope(k, cos, sin)
        out = K.attention(q, k, v, mask, self.scale)
        out = out[0].transpose(1, 0, 2).reshape(n, self.num_heads * self.head_dim)
        return self.out_proj(out)


def segment_mask(segment_ids):
    """Block-diagonal visibility [1, 1, N, N] for patches of several images packed in one sequence."""
    visible = segment_ids[:, None] == segment_ids[None, :]
    return K.attention_mask(visible[None, None])
