"""A llama-family decoder stack (embed_tokens, layers, norm) with static per-layer KV caches.

Models pick the rope (MultiAxisRotary variant) and whether layers carry q/k norms; prefill runs layer by
layer through ms_ocr/steps.py. A decode step (ms_ocr/runtime/decode.py) runs `construct` over caches its graph
writes, or `read_only_step` over caches the host writes (ms_ocr/runtime/kvcache.py).

A decoder with a reference sliding window (`window` W: Unlimited-OCR) attends, in decode, to every prompt token and
to the last W tokens (itself included). Its caches hold the prompt and a ring of W slots (runtime/window.py), so a
slot is no position: such a decoder takes slot_ids [B, T] holding each slot's token position (a large number where
the window hides it, or nothing is stored) and masks by the query's own position (pos[0]: 1-D positions) instead of
by its cache slot; cache_pos is then only where its k/v are written. The prompt itself attends plainly causally (all
its keys lie in the prompt), so prefill is unchanged.
"""

from mindspore import nn, ops

from ms_ocr.nn.attention import cache_write_index, causal_cache_mask
from ms_ocr.nn.blocks import DecoderLayer
from ms_ocr.nn.layers import Embedding, RMSNorm


class CausalDecoder(nn.Cell):
    def __init__(self, cfg, rotary, qk_norm=False, ffn=None, window=None):
        """cfg: vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
        num_key_value_heads, head_dim, rms_norm_eps, hidden_act. ffn(layer_index) may return a feed-forward
        Cell (e.g. MoE) for a layer; None keeps the dense gated MLP. window: None (full causal attention) or the
        reference sliding window W (see the module's docstring)."""
        super().__init__()
        self.cfg = cfg
        self.window = window
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary = rotary
        self.layers = nn.CellList([
            DecoderLayer(cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                         cfg.head_dim, cfg.rms_norm_eps, cfg.hidden_act, qk_norm=qk_norm, paired=rotary.paired,
                         mlp=ffn(i) if ffn else None)
            for i in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.num_kv_heads = cfg.num_key_value_heads

    def construct(self, x, pos, cache_pos, slot_ids):
        """Cached forward (decode): x [B, S, H]; pos [A, B, S] rope positions per axis; cache_pos [B, S]
        slots; slot_ids = arange(T) for a cache of T positions per sequence. T comes in as an input's shape,
        not from the cache Parameter's: a graph is keyed by its inputs, so each cache size gets its own graph
        (MindSpore reuses a compiled graph after a Parameter is resized, with stale shapes)."""
        cos, sin, write_idx, mask = self.step_inputs(pos, cache_pos, slot_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, write_idx, mask)
        return x

    def read_only_step(self, x, pos, cache_pos, slot_ids, caches=None):
        """`construct` for one new token per sequence over caches it does not write (allocated flat=False):
        (x, k, v) with every layer's k and v stacked [L, B, Hkv, 1, D] for the host to store at cache_pos.
        caches: (k0, v0, k1, v1, ...) graph inputs [B, Hkv, T, D] instead of the layers' cache Parameters."""
        cos, sin, mask = self.read_only_step_inputs(pos, cache_pos, slot_ids)
        ks, vs = [], []
        for i in range(len(self.layers)):
            if caches is None:
                x, k, v = self.layers[i].read_only_step(x, cos, sin, mask)
            else:
                x, k, v = self.layers[i].read_only_step(x, cos, sin, mask, caches[2 * i], caches[2 * i + 1])
            ks.append(k)
            vs.append(v)
        return x, ops.stack(ks), ops.stack(vs)

    def read_only_step_inputs(self, pos, cache_pos, slot_ids):
        """Rope tables and the mask of a read-only step: the token's own slot is not yet written, so only
        the slots before it are visible (its own k/v come in beside the cache)."""
        cos, sin = self.rotary(pos)
        return cos, sin, causal_cache_mask(self.kernels, self.mask_pos(pos, cache_pos) - 1, slot_ids)

    def mask_pos(self, pos, cache_pos):
        """What a slot's entry in slot_ids is compared with: the cache position, or with a window the query's own
        position (slot_ids then holds token positions)."""
        return cache_pos if self.window is None else pos[0]

    def step_inputs(self, pos, cache_pos, slot_ids):
        """What every layer of a cached step takes besides x: rope tables, cache write rows, visibility mask."""
        cos, sin = self.rotary(pos)
        write_idx = cache_write_index(cache_pos, self.num_kv_heads, slot_ids.shape[-1])
        return cos, sin, write_idx, causal_cache_mask(self.kernels, self.mask_pos(pos, cache_pos), slot_ids)
