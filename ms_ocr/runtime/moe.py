"""MoE layers off Ascend, with the experts routed on the host: a prompt's token-expert pairs grouped by expert (each
used expert runs once over its rows), and, where the native MoeExperts kernel is not routed, a one-sequence decode
step layer by layer, the k chosen experts read through zero-copy views of the stacked weights. With the kernel
(ops/moe.py experts_decode) decode stays in the whole-model graph, which routes in the graph and reads the chosen
experts' rows in place. Ascend keeps the fused dispatch in the graphs."""

import numpy as np
from mindspore import Tensor

from ms_ocr.nn.blocks import graph_input
from ms_ocr.ops import backend
from ms_ocr.processing.grid import bucket
from ms_ocr.steps import (DecodeHeadStep, DecodePrepStep, DenseLayerDecodeStep, ExpertsDecodeStep, ExpertsHeadStep,
                          ExpertsMoELayerDecodeStep, ExpertStep, GatedMLPStep, MoELayerDecodeStep, RouterStep)

# Rows of one routed expert's prefill call are padded to a multiple of this (one compile per bucket).
EXPERT_ROWS = 32


class HostMoE:
    """`decode_on_host`: one-sequence decode goes layer by layer with host routing (see the note above
    steps.DecodePrepStep); batched decode keeps the whole-model graph."""

    def __init__(self, model, compiler, cache, tspec):
        self.model, self.compiler, self.cache = model, compiler, cache
        self.cells = [layer.mlp for layer in model.text_layers() if layer.moe]
        self.expert_step = ExpertStep(tspec["act"])
        self.shared_mlp_step = GatedMLPStep(tspec["act"])
        self._router_steps = {}
        self._expert_views = {}
        # one-sequence decode through the layer graphs and host routing where it can run; the default only without
        # the native MoeExperts (with it the whole-model graph reads the chosen experts in place: faster)
        host_capable = (bool(self.cells) and cache.host_default and not tspec["qk_norm"]
                        and not any(cell.quantized for cell in self.cells))
        self.decode_on_host = host_capable and backend.NATIVE_MOE_EXPERTS is None
        if host_capable:
            moe = self.cells[0]
            attn = (tspec["heads"], tspec["kv_heads"], tspec["dim"], tspec["eps"])
            self.prep_step = DecodePrepStep(model)
            self.dense_step = DenseLayerDecodeStep(*attn, tspec["act"], tspec["paired"])
            self.moe_step = MoELayerDecodeStep(*attn, moe.top_k, moe.scaling, tspec["paired"])
            self.experts_step = ExpertsDecodeStep(tspec["act"], moe.top_k)
            self.experts_moe_step = ExpertsMoELayerDecodeStep(*attn, moe.top_k, moe.scaling, tspec["act"],
                                                              tspec["paired"])
            self.experts_head_step = ExpertsHeadStep(model, tspec["act"], moe.top_k)
            self.head_step = DecodeHeadStep(model)

    def serves_decode(self, batch):
        """Whether a decode step of `batch` sequences goes through decode() (one sequence, no dense-MoE layers,
        host-written caches)."""
        return (self.decode_on_host and batch == 1 and self.cache.host_written
                and not any(m.dense for m in self.cells))

    def router_step(self, moe):
        key = (moe.top_k, moe.scaling)
        if key not in self._router_steps:
            self._router_steps[key] = RouterStep(*key)
        return self._router_steps[key]

    def prefill(self, moe, h):
        """MoE FFN over a prompt h [1, S, H]: route in a graph, group token-expert pairs by expert on the host,
        run each used expert once over its rows (padded to EXPERT_ROWS buckets), sum the weighted results."""
        b, s, d = h.shape
        h2 = h.reshape(b * s, d)
        weights, ids = self.compiler.call("prefill", self.router_step(moe), h2, graph_input(moe.gate.weight))
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
        (zero-copy views of the stacked weights) and shared experts. An MoE layer's experts run in the same
        graph call as the next MoE layer's attention and router, or as the head. Returns logits [1, V]."""
        call = lambda step, *a: self.compiler.call("decode", step, *a)  # noqa: E731
        x, cos, sin, mask = call(self.prep_step, *args)
        pending = ()  # (h, routing weights, expert weight views) of an MoE layer whose experts have not run
        caches = self.cache.inputs(1)
        for i, layer in enumerate(self.model.text_layers()):
            inputs = (x, cos, sin, mask) + caches[i] + layer.weights(layer.weight_names)
            if not layer.moe:
                if pending:
                    x = call(self.experts_step, x, *pending)
                    inputs, pending = (x,) + inputs[1:], ()
                x, k, v = call(self.dense_step, *inputs)
                self.cache.store(i, k.asnumpy(), v.asnumpy(), (0,), cache_pos)
                continue
            gate_w = graph_input(layer.mlp.gate.weight)
            if pending:
                x, h, weights, ids, k, v = call(self.experts_moe_step, x, *pending, *inputs[1:], gate_w)
            else:
                x, h, weights, ids, k, v = call(self.moe_step, *inputs, gate_w)
            self.cache.store(i, k.asnumpy(), v.asnumpy(), (0,), cache_pos)
            gates, ups, downs, shared = self.expert_views(layer.mlp)  # (no int8 experts on this path)
            chosen = [int(e) for e in ids.asnumpy()[0]]
            pending = (h, weights, *[gates[e] for e in chosen], *[ups[e] for e in chosen],
                       *[downs[e] for e in chosen], *shared)
        if pending:
            return call(self.experts_head_step, x, *pending)
        return call(self.head_step, x)

    def expert_views(self, moe):
        """Per-expert Tensors sharing memory with MoE cell `moe`'s stacked expert Parameters (off Ascend, no
        copy: a CPU Parameter's asnumpy() is its own buffer, and Tensor.from_numpy keeps it; slicing the
        Parameter would copy each expert, and its value() would copy the whole stack, 293 MB per tensor at
        DeepSeek-OCR's size), plus the shared experts' weights. Made once per buffer, like graph_input's views:
        rebuilt if set_data replaced a stack (a kept view would read the freed buffer). Int8 stacks (--quantize
        int8): their scales' per-expert views after the shared experts' weights."""
        stacks = (moe.experts.gate_proj, moe.experts.up_proj, moe.experts.down_proj) + moe.expert_scales()
        ptrs = tuple(p.data_ptr() if hasattr(p, "data_ptr") else None for p in stacks)
        known = self._expert_views.get(id(moe))
        if known is None or known[0] != ptrs:
            views = [[Tensor.from_numpy(a[e]) for e in range(a.shape[0])] for a in (p.asnumpy() for p in stacks)]
            self._expert_views[id(moe)] = known = (ptrs, views)
        shared = moe.shared_experts
        return known[1][:3] + [tuple(graph_input(w) for w in (shared.gate_proj.weight, shared.up_proj.weight,
                                                              shared.down_proj.weight))] + known[1][3:]
