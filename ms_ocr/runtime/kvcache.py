"""The decoder layers' KV caches: sized per batch of sequences, in one of two layouts.

Off Ascend the host writes the caches (numpy views of the cache Parameters' own buffers) and the decode graphs
only read them: in a CPU graph a scatter_update into a cache Parameter, and a reshape of one, each copy the whole
tensor. On Ascend (and in the exported text
graph) the graphs write them in place ([batch*kv_heads*slots, head_dim], see docs/architecture.md)."""

from mindspore import Tensor

from ms_ocr.ops import backend


class KVCache:
    def __init__(self, model, compute_dtype, kv_dtype=None):
        self.model, self.compute_dtype = model, compute_dtype
        self.dtype = kv_dtype or compute_dtype  # the caches' (--kv-cache-dtype, device.resolve_kv_dtype)
        self.host_default = not backend.FUSED  # the layout reset() picks unless told
        self.slots = self.batch = 0
        self._views = None  # per layer (k, v) numpy views [B, Hkv, T, D] of host-written caches
        self._inputs = {}  # rows -> per layer (k, v) graph inputs over the first `rows` sequences

    def bytes_for(self, batch, slots):
        """The bytes caches for `batch` sequences of `slots` positions take (keys and values of every layer)."""
        itemsize = 2 if str(self.dtype).lower() in ("bfloat16", "float16") else 4
        return sum(2 * batch * layer.self_attn.num_kv_heads * slots * layer.self_attn.head_dim * itemsize
                   for layer in self.model.text_layers())

    @property
    def host_written(self):
        """The current caches are written by the host (graphs only read them)."""
        return self._views is not None

    def reset(self, batch, slots, host_writes=None):
        """Size the caches (and zero them: stale NaNs would poison masked slots). host_writes (default: off
        Ascend) lays them out [B, Hkv, T, D] for the host to write and keeps numpy views of them; False keeps the
        in-graph layout (DecodeStep, the exported text graph)."""
        host = self.host_default if host_writes is None else host_writes
        self.model.allocate_cache(batch, slots, self.dtype, flat=not host)
        self.slots, self.batch = slots, batch
        # a CPU Parameter's asnumpy() is its own buffer: writes through it are what the next graph reads
        self._views = [(layer.self_attn.k_cache.asnumpy(), layer.self_attn.v_cache.asnumpy())
                       for layer in self.model.text_layers()] if host else None
        self._inputs = {}

    def inputs(self, rows):
        """Per layer (k, v) Tensors sharing memory with the first `rows` sequence rows of the host-written
        caches (rows are the leading axis, so the views are contiguous): the graph inputs of the shared layer
        graphs of host-routed MoE decode and of a decode step over fewer rows than the cache holds."""
        if rows not in self._inputs:
            self._inputs[rows] = [(Tensor.from_numpy(k[:rows]), Tensor.from_numpy(v[:rows]))
                                  for k, v in self._views]
        return self._inputs[rows]

    def move_row(self, src, dst):
        """Copy sequence row `src` of every layer's host-written cache to row `dst`."""
        for k, v in self._views:
            k[dst] = k[src]
            v[dst] = v[src]

    def store(self, index, k, v, cache_rows, cache_pos):
        """Write layer `index`'s new k, v [B', Hkv, S, D] (numpy) at positions cache_pos.. of the cache's
        sequence slots cache_rows [B'] (host-written caches; into bf16 caches rounded to nearest, ties to even)."""
        k_view, v_view = self._views[index]
        s = k.shape[2]
        for i, (row, pos) in enumerate(zip(cache_rows, cache_pos)):
            k_view[row, :, pos:pos + s] = k[i]
            v_view[row, :, pos:pos + s] = v[i]
