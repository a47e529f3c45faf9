"""VLMRuntime: a loaded VLM Cell behind the engine's interface (encode images, plan and reset the cache, prefill,
decode), composed of the vision encoder (vision.py), the KV caches (kvcache.py) and, for MoE decoders, the host
routing (moe.py); compiled-graph bookkeeping is the CompileTimer's (ms_ocr/compiler.py).

Model-agnostic: a model package supplies the Cell (ms_ocr/interfaces.py VLMModel) and turns processor output into
per-image vision inputs; this class owns everything shape- and cache-related, and computes as its plan says
(ms_ocr/plan.py). It is the live implementation of interfaces.Runtime (the MindIR one: export/mindir.py).
"""

import numpy as np
from mindspore import Tensor, ops

from ms_ocr.compiler import IDLE_PREFILL_RESIDENT, CompileTimer
from ms_ocr.interfaces import Runtime
from ms_ocr.nn.blocks import MATRIX_PATHS, graph_input
from ms_ocr.processing.grid import bucket
from ms_ocr.runtime.decode import DecodeStep
from ms_ocr.runtime.host_step import HostStep
from ms_ocr.runtime.inputs import Buckets, RequestTooLong
from ms_ocr.runtime.kvcache import GraphKVCache, HostKVCache
from ms_ocr.runtime.moe import HostMoE
from ms_ocr.runtime.tensors import host_tensor
from ms_ocr.runtime.vision import VisionEncoder
from ms_ocr.runtime.window import WindowSlots
from ms_ocr.steps import (AllLogitsStep, DecoderAttentionPrefillStep, DecoderPrefillLayerStep,
                          DecoderQKNormPrefillLayerStep, DequantStep, LastLogitsStep, PrefillPrepStep)

# Prompt rows per prefill attention call; block i attends keys [0, (i+1)*chunk) only, skipping the masked
# upper triangle of the causal scores.
PREFILL_ATTENTION_CHUNK = 256


def chunk_sizes(n):
    """Power-of-two parts of n, largest first: 7 -> [4, 2, 1]."""
    return [1 << b for b in range(n.bit_length() - 1, -1, -1) if n >> b & 1]


class VLMRuntime(Runtime):
    def __init__(self, model, plan, max_positions, pad_id=0, buckets=None):
        self.model, self.plan = model, plan
        self.max_positions = max_positions
        self.pad_id = pad_id
        self.compute_dtype = plan.compute_dtype
        self.buckets = buckets or Buckets()
        # Vision and prefill graphs are compiled per image size and prompt bucket; those the last two requests
        # did not use are freed, but for small ones and prefill graphs within IDLE_PREFILL_RESIDENT of memory
        # (see CompileTimer.next_request). The decode graphs stay (one per cache size).
        self.compiler = CompileTimer(evictable=("vision", "prefill"),
                                     resident_budgets={"prefill": IDLE_PREFILL_RESIDENT})
        self.vision = VisionEncoder(model, plan, self.compiler)
        # the KV caches in both layouts (the decode step's kind follows): `host_writes` is the one a reset takes
        # unless told (host-written off Ascend; the exported text graph asks for the in-graph one)
        self.host_writes = plan.host_cache
        self.caches = {False: HostKVCache(model, plan.kv_dtype), True: GraphKVCache(model, plan.kv_dtype)}
        self.cache = self.caches[not self.host_writes]
        self.decode_steps = {in_graph: DecodeStep(model, in_graph) for in_graph in (False, True)}
        # on the CPU, the same step's native kernels called from the host where they serve the whole step
        self.host_step = HostStep(model, plan, self.compiler)
        self.tspec = model.text_layers()[0].spec
        # a decoder with a reference sliding window: prompt + a ring of W slots per sequence (runtime/window.py)
        self.window = None if model.attention_window is None else WindowSlots(model.attention_window)
        self.moe = HostMoE(model, plan, self.compiler, self.cache, self.tspec)
        self.prefill_prep_step = PrefillPrepStep(model)
        self.set_prefill_attention_block(PREFILL_ATTENTION_CHUNK)
        self.last_logits_step = LastLogitsStep(model)
        self.all_logits_step = AllLogitsStep(model)

    @property
    def host_cache(self):
        """Caches the host writes (off Ascend): the engine can decode fewer rows than the cache holds."""
        return self.host_writes

    @property
    def kv_cache_dtype(self):
        """The KV caches' dtype as --kv-cache-dtype names it (the plan's)."""
        return self.plan.kv_cache_name

    def tensor(self, array):
        return host_tensor(array, self.compute_dtype)

    def release_after_vision(self, graphs=False, layers=False):
        """For what follows: free the vision graphs once a request's images are encoded (`graphs`: no image size
        comes back) and each ViT layer's weights once it has run (`layers`: a one-request process)."""
        self.vision.release_graphs, self.vision.release_layers = graphs, layers

    @property
    def releases_vision(self):
        """Nothing of the vision side is needed again (release_after_vision(graphs=True)): a one-request process
        may free the vision weights too before loading the text weights."""
        return self.vision.release_graphs

    # ---- vision -------------------------------------------------------------------------------
    def encode_images(self, vision_inputs):
        """One request's per-image VisionInputs -> its image tokens Tensor [M, H] (kept on device)."""
        return self.vision.encode_batch([vision_inputs])[0]

    def encode_batch(self, requests):
        """Several requests' VisionInputs lists -> image tokens per request (None where a request has none)."""
        return self.vision.encode_batch(requests)

    # ---- cache --------------------------------------------------------------------------------
    def plan_slots(self, prompt_len, max_new_tokens):
        need = prompt_len + max_new_tokens
        if need > self.max_positions:
            raise RequestTooLong(f"prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                                 f"the model's max_position_embeddings ({self.max_positions})")
        padded = bucket(prompt_len, self.buckets.prefill)
        held = need if self.window is None else self.window.held(prompt_len, max_new_tokens)
        return bucket(max(held, padded), self.buckets.slots)

    def cache_bytes(self, batch, slots):
        """What caches for `batch` sequences of `slots` positions would take."""
        return self.cache.bytes_for(batch, slots)

    def reset_cache(self, batch, slots, host_writes=None):
        """Size the caches for `batch` sequences of `slots` positions (KVCache.reset), written by the host
        (`host_writes`, default off Ascend) or in the graphs."""
        self.cache = self.caches[not (self.host_writes if host_writes is None else host_writes)]
        self.moe.cache = self.cache
        self.cache.reset(batch, slots)
        if self.window is not None:
            self.window.reset()

    def move_cache_row(self, src, dst):
        """Copy sequence row `src` of the host-written caches to row `dst` (the batch engine keeps its running
        sequences in the first rows, so a step can decode just those)."""
        self.cache.move_row(src, dst)
        if self.window is not None:
            self.window.move(src, dst)

    # ---- prefill / decode ---------------------------------------------------------------------
    def _prefill_args(self, preps, feats, padded_len):
        """Right-padded batch inputs: ids [B, S], image row index [B, S] into the concatenated image tokens
        (-1 = text), positions [A, B, S]."""
        batch, axes = len(preps), preps[0].position_ids.shape[0]
        ids = np.full((batch, padded_len), self.pad_id, np.int32)
        image_index = np.full((batch, padded_len), -1, np.int32)
        pos = np.zeros((axes, batch, padded_len), np.int32)
        rows, offset = [], 0
        for b, (prep, f) in enumerate(zip(preps, feats)):
            s = prep.input_ids.shape[0]
            ids[b, :s] = prep.input_ids
            mask = prep.image_token_mask.astype(bool)
            image_index[b, :s][mask] = offset + np.arange(int(mask.sum()), dtype=np.int32)
            pos[:, b, :s] = prep.position_ids
            # Padding tokens take positions after the prompt; they write cache slots that decode overwrites
            # before any query can see them.
            pos[:, b, s:] = np.arange(s, padded_len) + prep.rope_delta
            if f is not None:
                rows.append(f)
                offset += f.shape[0]
        if not rows:  # text-only prompts: one dummy row that no token selects
            image_feats = Tensor(np.zeros((1, self.model.cfg.text.hidden_size), np.float32), self.compute_dtype)
        else:
            # zero rows up to a prefill bucket, which no token selects: the embedding graph is compiled per bucket
            # of image tokens, not per image size (a line reader's every line width compiled one)
            pad = bucket(offset, self.buckets.prefill) - offset
            if pad:
                rows.append(Tensor(np.zeros((pad, rows[0].shape[1]), np.float32), rows[0].dtype))
            image_feats = rows[0] if len(rows) == 1 else ops.concat(rows, 0)
        return Tensor(ids), image_feats, Tensor(image_index), Tensor(pos)

    def prefill_weights(self, layer):
        """A dense layer's weights for the shared prefill layer graph: as they are, or for a layer quantised by
        --quantize int8, its int8 matrices dequantised to fp32 in one graph call (DequantStep)."""
        weights = layer.weights(layer.weight_names)
        if not layer.quantized:
            return weights
        if self.dequant_step is None:
            self.dequant_step = DequantStep(self.plan.kernels)
        linears = {f"{path}.weight": linear for path, linear in zip(MATRIX_PATHS, layer.matrices())}
        pairs = [graph_input(p, self.plan.kernels.fused) for linear in linears.values()
                 for p in (linear.weight, linear.weight_scale)]
        wide = dict(zip(linears, self.compiler.call("prefill", self.dequant_step, *pairs)))
        return tuple(wide.get(name, w) for name, w in zip(layer.weight_names, weights))

    def _prefill_hidden(self, preps, feats, padded_len, slots, cache_rows):
        """Run the prompts [B, padded_len] through every layer (shared layer graphs), writing each layer's k/v
        to the cache rows of sequence slots `cache_rows` (one per prompt) of a cache of `slots` positions."""
        ids, image_feats, image_index, pos = self._prefill_args(preps, feats, padded_len)
        x, cos, sin = self.compiler.call("prefill", self.prefill_prep_step, ids, image_feats, image_index, pos)
        for index, layer in enumerate(self.model.text_layers()):
            if layer.moe:
                x, h, k, v = self.compiler.call("prefill", self.attention_prefill_step, x, cos, sin,
                                                *layer.weights(layer.weight_names))
                # Ascend: the MoE Cell's fused dispatch in a graph; elsewhere the host groups the experts' rows
                if self.plan.kernels.fused:
                    x = x + self.compiler.call("prefill", layer.mlp, h)
                else:
                    x = x + self.moe.prefill(layer.mlp, h)
            else:
                x, k, v = self.compiler.call("prefill", self.prefill_layer_step, x, cos, sin,
                                             *self.prefill_weights(layer))
            self.cache.store_prompt_layer(index, k, v, cache_rows)
        self.cache.finish_prompt(cache_rows, padded_len, self.compiler)
        return x

    def set_prefill_attention_block(self, rows):
        t, kn = self.tspec, self.plan.kernels
        step = DecoderQKNormPrefillLayerStep if t["qk_norm"] else DecoderPrefillLayerStep
        self.prefill_layer_step = step(kn, t["heads"], t["kv_heads"], t["dim"], t["eps"], t["act"], rows, t["paired"])
        self.dequant_step = None  # built on first use (--quantize int8)
        self.attention_prefill_step = DecoderAttentionPrefillStep(kn, t["heads"], t["kv_heads"], t["dim"], t["eps"],
                                                                  rows, t["paired"])

    def prefill(self, prep, image_feats, max_new_tokens):
        """Fill a fresh one-sequence cache with the prompt; logits of its last token [1, V]."""
        slots = self.plan_slots(prep.input_ids.shape[0], max_new_tokens)
        self.reset_cache(1, slots)
        return self.prefill_batch([prep], [image_feats], [0], slots)

    def prefill_batch(self, preps, feats, cache_rows, slots):
        """Prefill several prompts at once into sequence slots `cache_rows` of the current cache (sized by
        reset_cache(batch, slots)); logits of each prompt's last token [len(preps), V].

        The prompts run in chunks of power-of-two sizes (7 = 4 + 2 + 1, longest prompts first), so a server's
        groups of any size compile at most log2(batch) + 1 prefill shapes a prompt bucket
        (compiler.IDLE_PREFILL_RESIDENT)."""
        self.compiler.next_request()
        lengths = [p.input_ids.shape[0] for p in preps]
        if bucket(max(lengths), self.buckets.prefill) > slots:
            raise RequestTooLong(f"prompt of {max(lengths)} tokens does not fit a cache of {slots} positions")
        if self.window is not None:
            self.window.start(cache_rows, lengths)
        order = sorted(range(len(preps)), key=lambda i: -lengths[i])
        out, start = [], 0
        for size in chunk_sizes(len(preps)):
            part = order[start:start + size]
            start += size
            padded = bucket(max(lengths[i] for i in part), self.buckets.prefill)
            h = self._prefill_hidden([preps[i] for i in part], [feats[i] for i in part], padded, slots,
                                     [cache_rows[i] for i in part])
            out.append(self.compiler.call("prefill", self.last_logits_step, h,
                                          Tensor(np.array([lengths[i] for i in part], np.int32) - 1)))
        if len(out) == 1:
            return out[0] if order == sorted(order) else out[0][Tensor(np.argsort(order).astype(np.int32))]
        return ops.concat(out, 0)[Tensor(np.argsort(order).astype(np.int32))]

    def full_logits(self, prep, image_feats):
        """Logits at every prompt position [S, V] from a fresh cache (tests and dumps)."""
        s = prep.input_ids.shape[0]
        padded = bucket(s, self.buckets.prefill)
        slots = bucket(padded, self.buckets.slots)
        self.reset_cache(1, slots)
        h = self._prefill_hidden([prep], [image_feats], padded, slots, [0])
        return self.compiler.call("full_logits", self.all_logits_step, h).asnumpy()[0, :s]

    def decode(self, token, cache_pos, rope_delta, num_axes):
        """One token of a one-sequence cache: logits [1, V]."""
        return self.decode_batch([token], [cache_pos], [rope_delta], num_axes)

    def decode_batch(self, tokens, cache_pos, rope_delta, num_axes):
        """One token for each of the first B sequence rows of the cache (idle rows pass any token at any
        position of their own rows): tokens, cache_pos, rope_delta [B] -> logits [B, V]. B below the cache's
        batch (host-written caches only) reads just those rows. cache_pos: the tokens' positions; with a sliding
        window (runtime/window.py) the slots they are written to differ, and the step gets each slot's position."""
        rows = len(tokens)
        cache_pos = np.asarray(cache_pos, np.int32)
        pos = np.broadcast_to((cache_pos + np.asarray(rope_delta, np.int32))[None, :, None], (num_axes, rows, 1))
        if self.window is None:
            write, slot_ids = cache_pos, np.arange(self.cache.slots, dtype=np.int32)
        else:
            write, slot_ids = self.window.step(cache_pos, self.cache.slots)
        if self.host_step.serves(self.cache, rows):  # the whole step in one native call (runtime/host_step.py)
            return self.host_step(self.cache, tokens, pos[0, :, 0], write, slot_ids, num_axes)
        args = (Tensor(np.asarray(tokens, np.int32)[:, None]), Tensor(np.ascontiguousarray(pos)),
                Tensor(write[:, None]), Tensor(slot_ids))
        if self.moe.serves_decode(rows):
            return self.moe.decode(write, *args)
        step = self.decode_steps[self.cache.in_graph]
        outputs = self.compiler.call("decode", step, *args, *self.cache.step_caches(rows))
        return self.cache.store_step(outputs, rows, write)
