"""MoE layers off Ascend with the experts routed on the host, and the graphs that takes.

A prompt's token-expert pairs are grouped by expert (each used expert runs once over its rows). Where the native
MoeExperts kernel is not routed, a one-sequence decode step goes layer by layer, the k chosen experts read through
zero-copy views of the stacked weights: the whole-model decode graph would gather each token's k experts' weights
in the graph (MoE.construct), and on the CPU that gather copies the chosen experts' weights per layer and token, the
copies plus the products over them most of a token's time (profiler). The layers share a few graphs with weights and
KV caches as inputs (one graph per layer, owning its cache Parameters, compiled far longer). With the kernel
(ops/moe.py experts_decode) decode stays in the whole-model step (runtime/decode.py), which routes in the graph and
reads the chosen experts' rows in place. Ascend keeps the fused dispatch in the graphs."""

import numpy as np
from mindspore import Tensor, nn, ops

from ms_ocr.nn import functional as F
from ms_ocr.nn.blocks import graph_input
from ms_ocr.nn.moe import route
from ms_ocr.ops import dequant_q8, silu
from ms_ocr.processing.grid import bucket

# Rows of one routed expert's prefill call are padded to a multiple of this (one compile per bucket).
EXPERT_ROWS = 32


class RouterStep(nn.Cell):
    """MoE routing of h [T, H]: (weights [T, k], expert ids [T, k])."""

    def __init__(self, kernels, top_k, scaling):
        super().__init__()
        self.kernels, self.top_k, self.scaling = kernels, top_k, scaling

    def construct(self, h, gate_w):
        return route(self.kernels, h, gate_w, self.top_k, self.scaling)


class ExpertStep(nn.Cell):
    """One routed expert (its gate/up/down weights) over rows `rows` of h [T, H]; int8 weights (--quantize int8)
    with their scales after them, dequantised here."""

    def __init__(self, kernels, act):
        super().__init__()
        self.kernels, self.act = kernels, act

    def construct(self, h, rows, gw, uw, dw, *scales):
        kn = self.kernels
        if scales:
            gw, uw, dw = dequant_q8(kn, gw, scales[0]), dequant_q8(kn, uw, scales[1]), dequant_q8(kn, dw, scales[2])
        return F.gated_mlp(kn, ops.gather(h, rows, 0), gw, uw, dw, self.act)


class GatedMLPStep(nn.Cell):
    """A gated MLP given its weights (MoE shared experts)."""

    def __init__(self, kernels, act):
        super().__init__()
        self.kernels, self.act = kernels, act

    def construct(self, h, gw, uw, dw):
        return F.gated_mlp(self.kernels, h, gw, uw, dw, self.act)


class DecodePrepStep(nn.Cell):
    """Embedding, rope tables and mask of one step over caches the host writes."""

    def __init__(self, model):
        super().__init__(auto_prefix=False)
        self.model = model

    def construct(self, input_ids, pos, cache_pos, slot_ids):
        cos, sin, mask = self.model.text_read_only_inputs(pos, cache_pos, slot_ids)
        return self.model.embed(input_ids), cos, sin, mask


def experts_ffn(kn, x, h, weights, expert_weights, top_k, act):
    """x + the shared experts of h + sum_j weights[:, j] * expert_j(h) for k experts given as weights:
    h [1, 1, H], weights [1, k]; expert_weights = k gate, then k up, then k down projections, then the shared
    experts' gate, up, down."""
    k = top_k
    hs = h.reshape(-1, h.shape[-1])
    ys = [F.gated_mlp(kn, hs, expert_weights[j], expert_weights[k + j], expert_weights[2 * k + j], act)
          for j in range(k)]
    y = (ops.stack(ys, 1) * weights.astype(hs.dtype)[..., None]).sum(1)  # [1, k, H] -> [1, H]
    shared = F.gated_mlp(kn, hs, expert_weights[3 * k], expert_weights[3 * k + 1], expert_weights[3 * k + 2], act)
    return x + (y + shared).reshape(x.shape)


class LayerDecodeStep(nn.Cell):
    """One graph call of the host-routed decode, shared by every layer it serves: with `experts`, first the previous
    MoE layer's chosen experts (inputs x, h, routing weights, the 3k + 3 expert weights: experts_ffn), then `then`:
      "dense"  a dense layer: cos, sin, mask, its caches [B, Hkv, T, D] (zero-copy views), its weights
               (DecoderLayer.weight_names order) -> x and this token's k, v [B, Hkv, 1, D] for the host;
      "moe"    an MoE layer up to its router: the same inputs with its attention weights and mlp.gate.weight ->
               x, normed h [B, 1, H], routing weights and expert ids [B, k], this token's k, v;
      "head"   the final norm and head -> logits [1, V].
    An MoE layer's experts run in the same call as the next layer, or as the head: fewer graph calls per token (each
    with its launch cost), bit-identical logits."""

    def __init__(self, model, kernels, spec, top_k, scaling, experts, then):
        super().__init__(auto_prefix=False)
        self.model, self.kernels, self.experts, self.then = model, kernels, experts, then
        self.heads, self.kv_heads, self.dim, self.eps = spec["heads"], spec["kv_heads"], spec["dim"], spec["eps"]
        self.act, self.paired, self.top_k, self.scaling = spec["act"], spec["paired"], top_k, scaling
        self.silu_mlp = spec["act"] is silu

    def construct(self, x, *rest):
        kn = self.kernels
        if self.experts:
            n = 3 * self.top_k + 3
            x = experts_ffn(kn, x, rest[0], rest[1], rest[2:2 + n], self.top_k, self.act)
            rest = rest[2 + n:]
        if self.then == "head":
            return self.model.logits(self.model.final_norm(x[:, 0]))
        cos, sin, mask, k_cache, v_cache = rest[:5]
        if self.then == "dense":
            return F.decoder_layer_decode(kn, x, cos, sin, mask, k_cache, v_cache, rest[5:], self.heads,
                                          self.kv_heads, self.dim, self.eps, self.act, self.paired, self.silu_mlp)
        x, h, k, v = F.decoder_attention_decode(kn, x, cos, sin, mask, k_cache, v_cache, rest[5:11], self.heads,
                                                self.kv_heads, self.dim, self.eps, self.paired)
        weights, ids = route(kn, h.reshape(-1, h.shape[-1]), rest[11], self.top_k, self.scaling)
        return x, h, weights, ids, k, v


class HostMoE:
    """The host side of a model's MoE layers (off Ascend). `decode_on_host`: one-sequence decode goes layer by layer
    with host routing (LayerDecodeStep); batched decode keeps the whole-model step."""

    def __init__(self, model, plan, compiler, cache, tspec):
        self.model, self.compiler, self.cache = model, compiler, cache
        self.kernels, self.spec = plan.kernels, tspec
        self.cells = [layer.mlp for layer in model.text_layers() if layer.moe]
        self.expert_step = ExpertStep(self.kernels, tspec["act"])
        self.shared_mlp_step = GatedMLPStep(self.kernels, tspec["act"])
        self._router_steps, self._expert_views = {}, {}
        self.layer_steps = {}  # (experts, then) -> its LayerDecodeStep, made on first use
        # one-sequence decode through the layer graphs and host routing where it can run; the default only without
        # the native MoeExperts (with it the whole-model step reads the chosen experts in place: faster)
        host_capable = (bool(self.cells) and plan.host_cache and not tspec["qk_norm"]
                        and not any(cell.quantized for cell in self.cells))
        self.decode_on_host = host_capable and self.kernels.moe_experts is None
        if host_capable:
            self.prep_step = DecodePrepStep(model)

    def serves_decode(self, batch):
        """Whether a decode step of `batch` sequences goes through decode() (one sequence, no dense-MoE layers,
        host-written caches)."""
        return (self.decode_on_host and batch == 1 and not self.cache.in_graph
                and not any(m.dense for m in self.cells))

    def router_step(self, moe):
        key = (moe.top_k, moe.scaling)
        if key not in self._router_steps:
            self._router_steps[key] = RouterStep(self.kernels, *key)
        return self._router_steps[key]

    def layer_step(self, experts, then):
        """The LayerDecodeStep for (`experts`, `then`), made on first use."""
        if (experts, then) not in self.layer_steps:
            moe = self.cells[0]
            self.layer_steps[experts, then] = LayerDecodeStep(self.model, self.kernels, self.spec, moe.top_k,
                                                              moe.scaling, experts, then)
        return self.layer_steps[experts, then]

    def prefill(self, moe, h):
        """MoE FFN over a prompt h [1, S, H]: route in a graph, group token-expert pairs by expert on the host,
        run each used expert once over its rows (padded to EXPERT_ROWS buckets), sum the weighted results."""
        b, s, d = h.shape
        h2 = h.reshape(b * s, d)
        gate_w = graph_input(moe.gate.weight, self.kernels.fused)
        weights, ids = self.compiler.call("prefill", self.router_step(moe), h2, gate_w)
        weights, ids = weights.asnumpy(), ids.asnumpy()
        gates, ups, downs, shared, *scales = self.expert_views(moe)  # scales: int8 experts' (gate, up, down)
        out = np.zeros((b * s, d), np.float32)
        for e in np.unique(ids):
            tok, slot = np.nonzero(ids == e)
            rows = np.zeros(bucket(len(tok), EXPERT_ROWS), np.int32)
            rows[:len(tok)] = tok
            y = self.compiler.call("prefill", self.expert_step, h2, Tensor(rows), gates[e], ups[e], downs[e],
                                   *(views[e] for views in scales)).asnumpy()
            # a token picks an expert at most once, so `tok` has no repeats: a plain indexed add does the same
            # additions as np.add.at, the unbuffered (and much slower) form
            out[tok] += y[:len(tok)] * weights[tok, slot, None]
        y = self.compiler.call("prefill", self.shared_mlp_step, h2, *shared)
        return (y + Tensor(out, y.dtype)).reshape(b, s, d)

    def decode(self, cache_pos, *args):
        """A decode step of one sequence: each layer's graph up to its router, then the k selected experts
        (zero-copy views of the stacked weights) and shared experts, run in the same graph call as the next layer
        or as the head. Returns logits [1, V]."""
        call = lambda step, *a: self.compiler.call("decode", step, *a)  # noqa: E731
        x, cos, sin, mask = call(self.prep_step, *args)
        pending = ()  # (h, routing weights, expert weight views) of an MoE layer whose experts have not run
        caches = self.cache.inputs(1)
        for i, layer in enumerate(self.model.text_layers()):
            inputs = (cos, sin, mask) + caches[i] + layer.weights(layer.weight_names)
            if not layer.moe:
                x, k, v = call(self.layer_step(bool(pending), "dense"), x, *pending, *inputs)
                pending = ()
                self.cache.store(i, k.asnumpy(), v.asnumpy(), (0,), cache_pos)
                continue
            gate_w = graph_input(layer.mlp.gate.weight, self.kernels.fused)
            x, h, weights, ids, k, v = call(self.layer_step(bool(pending), "moe"), x, *pending, *inputs, gate_w)
            self.cache.store(i, k.asnumpy(), v.asnumpy(), (0,), cache_pos)
            gates, ups, downs, shared = self.expert_views(layer.mlp)  # (no int8 experts on this path)
            chosen = [int(e) for e in ids.asnumpy()[0]]
            pending = (h, weights, *[gates[e] for e in chosen], *[ups[e] for e in chosen],
                       *[downs[e] for e in chosen], *shared)
        return call(self.layer_step(bool(pending), "head"), x, *pending)

    def expert_views(self, moe):
        """Per-expert Tensors sharing memory with MoE cell `moe`'s stacked expert Parameters (off Ascend, no
        copy: a CPU Parameter's asnumpy() is its own buffer, and Tensor.from_numpy keeps it; slicing the
        Parameter would copy each expert, and its value() would copy the whole stack, 293 MB per tensor at
        DeepSeek-OCR's size), plus the shared experts' weights. Made once per buffer, like graph_input's views:
        rebuilt if set_data replaced a stack (a kept view would read the freed buffer). Int8 stacks (--quantize
        int8): their scales' per-expert views after the shared experts' weights."""
        stacks = (moe.experts.gate_proj, moe.experts.up_proj, moe.experts.down_proj) + moe.expert_scales()
        ptrs = tuple(p.data_ptr() if hasattr(p, "data_ptr") else None for p in stacks)  # MindSpore 2.7: none
        known = self._expert_views.get(id(moe))
        if known is None or known[0] != ptrs:
            views = [[Tensor.from_numpy(a[e]) for e in range(a.shape[0])] for a in (p.asnumpy() for p in stacks)]
            self._expert_views[id(moe)] = known = (ptrs, views)
        shared = moe.shared_experts
        weights = (shared.gate_proj.weight, shared.up_proj.weight, shared.down_proj.weight)
        return known[1][:3] + [tuple(graph_input(w, self.kernels.fused) for w in weights)] + known[1][3:]
