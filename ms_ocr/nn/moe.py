"""DeepSeek mixture-of-experts FFN: softmax router in fp32, top-k experts (no renormalisation, times
routed_scaling_factor) plus always-on shared experts (reference: transformers DeepseekOcr2TextMoe).

Expert weights are stacked per layer (`experts.gate_proj` [E, I, H], `experts.up_proj` [E, I, H],
`experts.down_proj` [E, H, I]; the loader stacks the checkpoint's per-expert tensors) so that a graph can
index them. Paths:
- Ascend (fused kernels): MoeTokenPermute, GroupedMatmul over the stacked weights, MoeTokenUnpermute, in
  the graph for prefill and decode alike (ms_ocr/ops/moe.py; its composed fallback is what the tests check
  the fused branch against).
Elsewhere (composed, static shapes):
- in graph (decode, a few tokens): on the CPU the native MoeExperts (ops/moe.py experts_decode) reads the
  selected experts' rows of the stacks as they are stored; otherwise gather the k selected experts' weights per
  token (fp32 copies) and run them as batched matmuls. Either reads only the selected experts (k/E of the
  expert weights).
- prefill (hundreds of tokens): the router runs in a graph, the host groups the token-expert pairs by
  expert, and each used expert runs once over its rows padded to a bucket (`expert_rows`) through one shared
  graph with the expert's weights as inputs; the weighted results are summed on the host.
- one graph that serves any token count without the host (the CPU MindIR export, `dense = True`): every
  token runs through every expert, weighted by its routing weight (zero where not selected): E/k times the
  routed FLOPs, and a decode step reads all experts instead of k. Measured on MindSpore 2.10 CPU, the
  cheaper forms do not survive export with a dynamic token count: a graph-side switch between the gather
  path and this one fails to load ("actor already exists"), and gathering the distinct selected experts
  (ops.unique) keeps the first call's shapes on later calls.
"""

import mindspore as ms
from mindspore import nn, ops

from ms_ocr import ops as K
from ms_ocr.nn import functional as F
from ms_ocr.nn.layers import zeros_param
from ms_ocr.nn.mlp import GatedMLP
from ms_ocr.ops import get_activation

_bmm_t = ops.BatchMatMul(transpose_b=True)


def route(kn, h, gate_w, top_k, scaling):
    """h [T, H] -> (weights [T, k] fp32, expert ids [T, k] int32): softmax over all experts in fp32, top-k."""
    logits = F.linear(kn, h.astype(ms.float32), K.widen(kn, gate_w, ms.float32))  # a bf16-resident router widened
    scores = ops.softmax(logits, -1)
    weights, ids = ops.topk(scores, top_k)
    return weights * scaling, ids.astype(ms.int32)


class Router(nn.Cell):
    def __init__(self, num_experts, hidden):
        super().__init__()
        self.weight = zeros_param((num_experts, hidden))


class StackedExperts(nn.Cell):
    def __init__(self, num_experts, hidden, intermediate):
        super().__init__()
        self.gate_proj = zeros_param((num_experts, intermediate, hidden))
        self.up_proj = zeros_param((num_experts, intermediate, hidden))
        self.down_proj = zeros_param((num_experts, hidden, intermediate))


class MoE(nn.Cell):
    def __init__(self, hidden, moe_intermediate, num_experts, top_k, num_shared, scaling=1.0, act="silu"):
        super().__init__()
        self.gate = Router(num_experts, hidden)
        self.experts = StackedExperts(num_experts, hidden, moe_intermediate)
        self.shared_experts = GatedMLP(hidden, moe_intermediate * num_shared, act)
        self.top_k, self.scaling = top_k, scaling
        self.act = get_activation(act)
        self.silu = self.act is get_activation("silu")  # what the native MoeExperts computes
        self.dense = False  # every expert for every token (the exported graph's path)
        # --quantize int8 (models/quantize.py): the expert stacks int8, each with its <stack>_scale
        self.quantized = False

    def construct(self, x):
        """In-graph path (decode): x [B, S, H] -> [B, S, H]."""
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        t = h.shape[0]
        kn = self.kernels
        weights, ids = route(kn, h, self.gate.weight, self.top_k, self.scaling)
        if kn.fused:
            return (self.routed_experts(h, weights, ids) + self.shared_experts(h)).reshape(shape)
        if self.dense:
            return (self.dense_experts(h, weights, ids) + self.shared_experts(h)).reshape(shape)
        stacks = (self.experts.gate_proj, self.experts.up_proj, self.experts.down_proj)
        if self.silu and K.experts_native(kn, h, stacks):
            y = K.experts_decode(kn, h, weights, ids, stacks, self.expert_scales())
            return (y + self.shared_experts(h)).reshape(shape)
        flat = ids.reshape(-1)
        gw = K.expert_rows(kn, self.experts.gate_proj, flat, h.dtype)  # [T*k, I, H]
        uw = K.expert_rows(kn, self.experts.up_proj, flat, h.dtype)
        dw = K.expert_rows(kn, self.experts.down_proj, flat, h.dtype)  # [T*k, H, I]
        xr = ops.broadcast_to(h[:, None, None, :], (t, self.top_k, 1, shape[-1])).reshape(t * self.top_k, 1, -1)
        mid = self.act(kn, _bmm_t(xr, gw)) * _bmm_t(xr, uw)  # [T*k, 1, I]
        y = _bmm_t(mid, dw).reshape(t, self.top_k, -1)  # [T*k, 1, H]
        y = (y * weights.astype(y.dtype)[..., None]).sum(1)
        return (y + self.shared_experts(h)).reshape(shape)

    def routed_weights(self):
        """The router and the routed expert stacks (gate, up, down), then their int8 scales if quantised: the host
        step's MoE layer operands (ms_ocr/ops/native/decode_layer.cc MoeLayer)."""
        e = self.experts
        return (self.gate.weight, e.gate_proj, e.up_proj, e.down_proj) + self.expert_scales()

    def expert_scales(self):
        """The int8 expert stacks' scales (gate, up, down), or () when they are not quantised."""
        if not self.quantized:
            return ()
        e = self.experts
        return e.gate_proj_scale, e.up_proj_scale, e.down_proj_scale

    def routed_experts(self, h, weights, ids):
        """h [T, H] through its selected experts by permute / grouped matmul / unpermute (ms_ocr/ops/moe.py):
        the Ascend path for any token count, in one graph."""
        kn = self.kernels
        permuted, rows = K.token_permute(kn, h, ids)
        ends = K.expert_ends(ids, self.experts.gate_proj.shape[0])
        mid = self.act(kn, K.grouped_matmul(kn, permuted, self.experts.gate_proj, ends)) * \
            K.grouped_matmul(kn, permuted, self.experts.up_proj, ends)
        return K.token_unpermute(kn, K.grouped_matmul(kn, mid, self.experts.down_proj, ends), rows, weights)

    def dense_experts(self, h, weights, ids):
        """h [T, H] through every expert, weighted per token (zero where not selected): [T, H].

        Gate and up projections of all experts side by side are one 2-D matmul each (no broadcast of the
        dynamic token count, which an exported graph would freeze at its first call's shape)."""
        kn = self.kernels
        num, inter, hidden = self.experts.gate_proj.shape
        mid = self.act(kn, F.linear(kn, h, self.experts.gate_proj.reshape(-1, hidden))) * \
            F.linear(kn, h, self.experts.up_proj.reshape(-1, hidden))  # [T, E*I]
        w = (ops.one_hot(ids, num, ops.ones((), ms.float32), ops.zeros((), ms.float32)) * weights[:, :, None]).sum(1)
        mid = mid.reshape(h.shape[0], num, inter) * w.astype(mid.dtype)[..., None]  # [T, E, I]
        down = K.widen(kn, self.experts.down_proj, mid.dtype)
        return _bmm_t(mid.transpose(1, 0, 2), down).sum(0)  # [E, T, H] -> [T, H]
