"""Mixture-of-experts dispatch kernels: Ascend's fused MoeTokenPermute / GroupedMatmul / MoeTokenUnpermute, or
composed fallbacks computing what those operators are documented to compute.

The three together run a routed FFN over any number of tokens inside one graph:
  permuted, rows = token_permute(h [T, H], ids [T, k])      token-expert pairs grouped by expert (stable)
  y = grouped_matmul(permuted [T*k, H], w [E, N, H], ends)  pair r uses expert e with ends[e-1] <= r < ends[e]
  out = token_unpermute(y [T*k, N], rows, probs [T, k])     [T, N]: sum_j probs[t, j] * y[rows[t*k + j]]
The fallbacks index expert weights per pair (memory T*k*N*H): they are for small token counts and for checking
the fused branch; the CPU runtime runs prefill experts through its host dispatch (ms_ocr/runtime/moe.py).

On the CPU a decode step's routed experts run through the native MoeExperts (`experts_decode`), which reads the
selected experts' rows of the stacks as they are stored (fp32, bf16, int8 with scales).
"""

import mindspore as ms
from mindspore import ops

_bmm_t = ops.BatchMatMul(transpose_b=True)


def token_permute(kn, tokens, ids):
    """tokens [T, H], ids [T, k] int32 -> (permuted [T*k, H] ordered by expert, pairs of one expert in token
    order; rows [T*k] int32: the permuted row of pair t*k + j)."""
    if kn.fused:
        permuted, rows = ops.moe_token_permute(tokens, ids)
        return permuted, rows
    k = ids.shape[-1]
    flat = ids.reshape(-1)
    # stable order by expert: sort (expert, pair index) as one distinct key
    key = flat * flat.shape[0] + ops.arange(flat.shape[0], dtype=ms.int32)
    _, order = ops.sort(key)
    order = order.astype(ms.int32)
    rows = ops.scatter_nd(order[:, None], ops.arange(flat.shape[0], dtype=ms.int32), (flat.shape[0],))
    return ops.gather(tokens, order // k, 0), rows


def expert_ends(ids, num_experts):
    """Cumulative pair counts per expert [E] int64 (the group list of grouped_matmul)."""
    counts = ops.one_hot(ids.reshape(-1), num_experts, ops.ones((), ms.int32), ops.zeros((), ms.int32)).sum(0)
    return ops.cumsum(counts, 0).astype(ms.int64)


def grouped_matmul(kn, x, weight, ends):
    """x [M, K] rows grouped by expert, weight [E, N, K] (out, in), ends [E] int64 cumulative row counts ->
    [M, N]: row r times weight[e]^T for the expert e whose group holds r."""
    if kn.fused:
        from mindspore.ops.auto_generate import grouped_matmul as gmm
        return gmm([x], [weight], group_list=ends, split_item=3, group_type=0, transpose_b=True)[0]
    rows = ops.arange(x.shape[0], dtype=ms.int64)
    expert = (rows[:, None] >= ends[None, :]).astype(ms.int32).sum(1)  # groups that end at or before r
    w = ops.gather(weight, expert, 0)  # [M, N, K]
    return _bmm_t(x[:, None, :], w)[:, 0, :]


def token_unpermute(kn, permuted, rows, probs):
    """permuted [T*k, N], rows [T*k] (from token_permute), probs [T, k] -> [T, N] weighted sums per token."""
    if kn.fused:
        return ops.moe_token_unpermute(permuted, rows, probs)
    t, k = probs.shape
    y = ops.gather(permuted, rows, 0).reshape(t, k, -1)
    return (y * probs.astype(y.dtype)[..., None]).sum(1)


def experts_native(kn, h, stacks):
    """Whether experts_decode serves these tokens (decided at graph-compile time): the native kernel is routed,
    h [T, H] is fp32 and the stacks (gate, up, down) are fp32, bf16 or int8."""
    ok = kn.moe_experts is not None and h.dtype == ms.float32
    for w in stacks:  # a loop, not all(<generator>): graph mode runs a generator in Python at every call
        ok = ok and w.dtype in (ms.float32, ms.bfloat16, ms.int8)
    return ok


def experts_decode(kn, h, weights, ids, stacks, scales=()):
    """h [T, H] fp32 through the experts ids [T, k] selected, weighted by weights [T, k]: [T, H] fp32 =
    sum_j weights[t, j] * down[e] (silu(gate[e] h) * up[e] h), e = ids[t, j]. stacks: (gate [E, I, H], up
    [E, I, H], down [E, H, I]); int8 stacks with their scales (per row [E, N] or per group [E, N, K / G])."""
    return kn.moe_experts(h, ids, weights.astype(ms.float32), *stacks, *scales)
