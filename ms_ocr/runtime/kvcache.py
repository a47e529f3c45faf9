"""The decoder layers' KV caches behind one interface (`KVCache`), in two implementations.

`HostKVCache` (off Ascend): the host writes the caches ([B, Hkv, T, D], through numpy views of the cache
Parameters' own buffers) and the graphs only read them: in a CPU graph a scatter_update into a cache Parameter, and
a reshape of one, each copy the whole tensor. `GraphKVCache` (Ascend, and the exported text graph): the graphs write
them in place ([batch*kv_heads*slots, head_dim], see docs/architecture.md). Both are sized per batch of sequences and
zeroed at reset; the decode step (runtime/decode.py) reads `step_caches` and hands its outputs to `store_step`."""

import abc

import numpy as np
from mindspore import Tensor, ops

from ms_ocr.convert import hugepages
from ms_ocr.steps import CacheWriteStep


class KVCache(abc.ABC):
    """What the runtime and its decode step need of the caches. `in_graph`: the graphs write them (the decode step
    then returns no k/v); otherwise the host stores each step's k/v, and a step may compute fewer sequence rows
    than the cache holds."""

    in_graph = False

    def __init__(self, model, dtype):
        self.model, self.dtype = model, dtype
        self.slots = self.batch = 0

    def bytes_for(self, batch, slots):
        """The bytes caches for `batch` sequences of `slots` positions take (keys and values of every layer)."""
        itemsize = 2 if str(self.dtype).lower() in ("bfloat16", "float16") else 4
        return sum(2 * batch * layer.self_attn.num_kv_heads * slots * layer.self_attn.head_dim * itemsize
                   for layer in self.model.text_layers())

    def reset(self, batch, slots):
        """Size the caches for `batch` sequences of `slots` positions, zeroed (stale NaNs would poison masked
        slots)."""
        self.model.allocate_cache(batch, slots, self.dtype, flat=self.in_graph)
        self.slots, self.batch = slots, batch

    @abc.abstractmethod
    def store_prompt_layer(self, index, k, v, cache_rows):
        """Layer `index`'s prompt k, v [B', Hkv, S, D] (Tensors) for sequence slots cache_rows [B'], from position 0."""

    @abc.abstractmethod
    def finish_prompt(self, cache_rows, padded_len, compiler):
        """After every layer's store_prompt_layer of one prefill of `padded_len` positions."""

    @abc.abstractmethod
    def step_caches(self, rows):
        """The decode step's cache inputs for the first `rows` sequence rows (a tuple of Tensors, maybe empty)."""

    @abc.abstractmethod
    def store_step(self, outputs, rows, cache_pos):
        """A decode step's outputs (logits, then with host-written caches every layer's k, v [L, B, Hkv, 1, D])
        stored at cache_pos [B] of the first `rows` sequence rows; returns the logits."""


class HostKVCache(KVCache):
    """Caches the host writes: [B, Hkv, T, D] Parameters with numpy views of their own buffers (a CPU Parameter's
    asnumpy() is its own buffer: writes through it are what the next graph reads). Into bf16 caches the stores
    round to nearest, ties to even."""

    def __init__(self, model, dtype):
        super().__init__(model, dtype)
        self._views = []  # per layer (k, v) numpy views [B, Hkv, T, D]
        self._inputs = {}  # rows -> per layer (k, v) graph inputs over the first `rows` sequences
        self.generation = 0  # counts resets: what holds the buffers of one (runtime/host_step.py) sees it change

    def reset(self, batch, slots):
        super().reset(batch, slots)
        pairs = [(layer.self_attn.k_cache, layer.self_attn.v_cache) for layer in self.model.text_layers()]
        # on 2 MB pages, as the weights: each decode step streams the caches too (hugepages.py; MindSpore 2.7's
        # Tensors give no address, as convert/loader.py allows for)
        if hasattr(Tensor, "data_ptr"):
            hugepages.zeroed_on_huge_pages([(c.data_ptr(), c.nbytes) for pair in pairs for c in pair])
        self._views = [(k.asnumpy(), v.asnumpy()) for k, v in pairs]
        self._inputs = {}
        self.generation += 1

    @property
    def views(self):
        """Per layer (k, v): numpy views [B, Hkv, T, D] of the cache Parameters' own buffers."""
        return self._views

    def inputs(self, rows):
        """Per layer (k, v) Tensors sharing memory with the first `rows` sequence rows (rows are the leading
        axis, so the views are contiguous): the graph inputs of the host-routed MoE's layer graphs and of a
        decode step over fewer rows than the cache holds."""
        if rows not in self._inputs:
            self._inputs[rows] = [(Tensor.from_numpy(k[:rows]), Tensor.from_numpy(v[:rows]))
                                  for k, v in self._views]
        return self._inputs[rows]

    def step_caches(self, rows):
        """(k0, v0, k1, v1, ...) views of the first `rows` rows; none when the step computes every row (its graph
        then reads the cache Parameters themselves)."""
        if rows == self.batch:
            return ()
        return tuple(t for kv in self.inputs(rows) for t in kv)

    def move_row(self, src, dst):
        """Copy sequence row `src` of every layer's cache to row `dst` (the batch engine keeps its running
        sequences in the first rows, so a step can compute just those)."""
        for k, v in self._views:
            k[dst] = k[src]
            v[dst] = v[src]

    def store(self, index, k, v, cache_rows, cache_pos):
        """Write layer `index`'s new k, v [B', Hkv, S, D] (numpy) at positions cache_pos.. of the cache's
        sequence slots cache_rows [B']."""
        k_view, v_view = self._views[index]
        s = k.shape[2]
        for i, (row, pos) in enumerate(zip(cache_rows, cache_pos)):
            k_view[row, :, pos:pos + s] = k[i]
            v_view[row, :, pos:pos + s] = v[i]

    def store_prompt_layer(self, index, k, v, cache_rows):
        self.store(index, k.asnumpy(), v.asnumpy(), cache_rows, [0] * len(cache_rows))

    def finish_prompt(self, cache_rows, padded_len, compiler):
        """Every layer was stored as it ran: nothing is kept."""

    def store_step(self, outputs, rows, cache_pos):
        logits, ks, vs = outputs
        ks, vs, seqs = ks.asnumpy(), vs.asnumpy(), range(rows)
        for i in range(len(ks)):
            self.store(i, ks[i], vs[i], seqs, cache_pos)
        return logits


class GraphKVCache(KVCache):
    """Caches the graphs write in place ([B*Hkv*T, D] rows; a decode step computes every sequence row): a prompt's
    k, v go in with one CacheWriteStep after its layers, a decode step writes its own."""

    in_graph = True

    def __init__(self, model, dtype):
        super().__init__(model, dtype)
        self.write_step = CacheWriteStep(model)
        self._pending = []

    def store_prompt_layer(self, index, k, v, cache_rows):
        self._pending.append((k, v))

    def finish_prompt(self, cache_rows, padded_len, compiler):
        ks, vs = ops.stack([k for k, _ in self._pending]), ops.stack([v for _, v in self._pending])
        self._pending = []
        kv_heads = self.model.num_kv_heads
        heads = np.asarray(cache_rows, np.int32)[:, None] * kv_heads + np.arange(kv_heads, dtype=np.int32)[None]
        write_idx = Tensor((heads[:, :, None] * self.slots + np.arange(padded_len, dtype=np.int32)).reshape(-1))
        rows = Tensor(np.arange(self.model.text_layers()[0].self_attn.k_cache.shape[0], dtype=np.int32))
        compiler.call("prefill", self.write_step, write_idx, ks, vs, rows)

    def step_caches(self, rows):
        return ()

    def store_step(self, outputs, rows, cache_pos):
        return outputs
