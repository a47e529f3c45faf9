"""Runs a loaded VLM Cell: shape buckets, per-request KV cache, compiled vision/prefill/decode steps.

Model-agnostic: a model package supplies the Cell (see ms_ocr/steps.py for the methods it needs) and
turns processor output into per-image vision inputs; this class owns everything shape- and cache-related.
"""

import time
from dataclasses import dataclass, field

import numpy as np
import mindspore as ms
from mindspore import Tensor, ops

from ms_ocr.processing.grid import bucket
from ms_ocr.steps import (AllLogitsStep, AttentionChunkStep, DecodeStep, DecoderAttentionPrefillStep,
                          DecoderPrefillLayerStep, DecoderQKNormPrefillLayerStep, ExpertStep, GatedMLPStep,
                          LastLogitsStep, PrefillPrepStep, RouterStep, VisionEmbedStep, VisionHeadStep,
                          ViTAttentionInNoRopeStep, ViTAttentionInStep, ViTOutStep)

# Query rows per vision attention call: scores [H, 512, N] instead of [H, N, N] (measured at 4k patches:
# 0.8 GB instead of 2.5 GB of activations, and no slower).
VISION_ATTENTION_CHUNK = 512
# Rows of one routed expert's prefill call are padded to a multiple of this (one compile per bucket).
EXPERT_ROWS = 32
# Prompt rows per prefill attention call; block i attends keys [0, (i+1)*chunk) only, skipping the masked
# upper triangle of the causal scores.
PREFILL_ATTENTION_CHUNK = 256


class RequestTooLong(ValueError):
    pass


@dataclass
class Buckets:
    """Granularity of the padded shapes graphs are compiled for (each new bucket compiles once)."""
    prefill: int = 128
    slots: int = 256


@dataclass
class VisionInputs:
    """One image's host arrays: for the model's vision_embed and for its vision_head (after the layers)."""
    embed: tuple
    head: tuple


@dataclass
class Prepared:
    """One request after preprocessing: token ids, rope positions [A, S], and the rope delta of decode."""
    input_ids: np.ndarray
    position_ids: np.ndarray
    rope_delta: int
    image_token_mask: np.ndarray
    vision_inputs: list = field(default_factory=list)


class CompileTimer:
    """Compiles a step separately the first time it sees an input-shape key, so run time excludes it."""

    def __init__(self):
        self.seconds = {}
        self._seen = set()

    def call(self, name, cell, *args):
        key = (name,) + tuple((tuple(a.shape), str(a.dtype)) for a in args)
        if key not in self._seen:
            t0 = time.perf_counter()
            cell.compile(*args)
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
            self._seen.add(key)
        return cell(*args)


class VLMRuntime:
    def __init__(self, model, max_positions, pad_id=0, compute_dtype=ms.float32, buckets=None):
        self.model = model
        self.max_positions = max_positions
        self.pad_id = pad_id
        self.compute_dtype = compute_dtype
        self.buckets = buckets or Buckets()
        self.vision_embed_step = VisionEmbedStep(model)
        self.vision_head_step = VisionHeadStep(model)
        if model.vision_layers():  # models whose vision tower is not a ViTLayer stack override encode_images
            vspec = model.vision_layers()[0].spec
            in_step = ViTAttentionInStep if vspec["rope"] else ViTAttentionInNoRopeStep
            self.vit_in_step = in_step(vspec["heads"], vspec["eps"])
            self.vit_out_step = ViTOutStep(vspec["eps"], vspec["act"])
            self.vision_attention_step = AttentionChunkStep(vspec["dim"] ** -0.5)
        self.vision_attention_chunk = VISION_ATTENTION_CHUNK
        self.prefill_prep_step = PrefillPrepStep(model)
        tspec = model.text_layers()[0].spec
        self.tspec = tspec
        self.set_prefill_attention_block(PREFILL_ATTENTION_CHUNK)
        self.last_logits_step = LastLogitsStep(model)
        self.all_logits_step = AllLogitsStep(model)
        self.decode_step = DecodeStep(model)
        self.expert_step = ExpertStep(tspec["act"])
        self.shared_mlp_step = GatedMLPStep(tspec["act"])
        self._router_steps = {}
        self.compiler = CompileTimer()

    # ---- vision -------------------------------------------------------------------------------
    def tensor(self, array):
        """Host array -> Tensor: floats in the compute dtype, integers as int32, booleans as they are."""
        array = np.asarray(array)
        if array.dtype == np.bool_:
            return Tensor(array)
        if np.issubdtype(array.dtype, np.floating):
            return Tensor(array.astype(np.float32), self.compute_dtype)
        return Tensor(array.astype(np.int32))

    def encode_images(self, vision_inputs):
        """Per-image VisionInputs -> image tokens Tensor [M, H] (kept on device for prefill).

        Each image runs at its exact patch count (one compile per size, no padding or mask), layer by layer
        through one shared layer graph.
        """
        if hasattr(self.model, "encode_views"):  # vision towers that are not a ViTLayer stack (DeepSeek-OCR)
            return self.model.encode_views(self, vision_inputs)
        feats = [self.compiler.call("vision", self.vision_head_step, self.vision_tower(item),
                                    *[self.tensor(a) for a in item.head]) for item in vision_inputs]
        return feats[0] if len(feats) == 1 else ops.concat(feats, 0)

    def vision_tower(self, item):
        """One image's patch embeddings through every ViT layer: [N, C] (before the model's vision head)."""
        out = self.compiler.call("vision", self.vision_embed_step, *[self.tensor(a) for a in item.embed])
        x, rope = (out[0], tuple(out[1:])) if isinstance(out, tuple) else (out, ())
        for layer in self.model.vision_layers():
            x = self.vision_layer(layer, x, rope)
        return x

    def vision_layer(self, layer, x, rope):
        q, k, v = self.compiler.call("vision", self.vit_in_step, x, *rope, *layer.weights(layer.attn_in_names))
        n, step = q.shape[2], self.vision_attention_chunk
        chunks = [self.compiler.call("vision", self.vision_attention_step, q[:, :, s:s + step], k, v)
                  for s in range(0, n, step)]
        attn = chunks[0] if len(chunks) == 1 else ops.concat(chunks, 2)
        return self.compiler.call("vision", self.vit_out_step, x, attn, *layer.weights(layer.out_names))

    # ---- cache --------------------------------------------------------------------------------
    def plan_slots(self, prompt_len, max_new_tokens):
        need = prompt_len + max_new_tokens
        if need > self.max_positions:
            raise RequestTooLong(f"prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                                 f"the model's max_position_embeddings ({self.max_positions})")
        padded = bucket(prompt_len, self.buckets.prefill)
        return bucket(max(need, padded), self.buckets.slots)

    def reset_cache(self, batch, slots):
        """Size the caches for this request (and zero them: stale NaNs would poison masked slots)."""
        self.model.allocate_cache(batch, slots, self.compute_dtype)

    # ---- prefill / decode ---------------------------------------------------------------------
    def _prefill_args(self, prep, image_feats, padded_len):
        s = prep.input_ids.shape[0]
        ids = np.full((1, padded_len), self.pad_id, np.int32)
        ids[0, :s] = prep.input_ids
        image_index = np.full((1, padded_len), -1, np.int32)
        mask = prep.image_token_mask.astype(bool)
        image_index[0, :s][mask] = np.arange(int(mask.sum()), dtype=np.int32)
        axes = prep.position_ids.shape[0]
        pos = np.zeros((axes, 1, padded_len), np.int32)
        pos[:, 0, :s] = prep.position_ids
        # Padding tokens take positions after the prompt; they write cache slots that decode overwrites
        # before any query can see them.
        pos[:, 0, s:] = np.arange(s, padded_len) + prep.rope_delta
        if image_feats is None:  # text-only prompt: one dummy row that no token selects
            image_feats = Tensor(np.zeros((1, self.model.cfg.text.hidden_size), np.float32), self.compute_dtype)
        return Tensor(ids), image_feats, Tensor(image_index), Tensor(pos)

    def _prefill_hidden(self, prep, image_feats, padded_len, slots):
        """Run the prompt through every layer (shared layer graphs), writing each layer's k/v to its cache."""
        ids, feats, image_index, pos = self._prefill_args(prep, image_feats, padded_len)
        x, cos, sin = self.compiler.call("prefill", self.prefill_prep_step, ids, feats, image_index, pos)
        kv_heads = self.model.num_kv_heads
        write_idx = Tensor((np.arange(kv_heads, dtype=np.int32)[:, None] * slots
                            + np.arange(padded_len, dtype=np.int32)[None]).reshape(-1))
        for layer in self.model.text_layers():
            if layer.moe:
                x, h, k, v = self.compiler.call("prefill", self.attention_prefill_step, x, cos, sin,
                                                *layer.weights(layer.weight_names))
                x = x + self.moe_prefill(layer.mlp, h)
            else:
                x, k, v = self.compiler.call("prefill", self.prefill_layer_step, x, cos, sin,
                                             *layer.weights(layer.weight_names))
            layer.self_attn.write_cache(write_idx, k, v)
        return x

    def moe_prefill(self, moe, h):
        """MoE FFN over a prompt h [1, S, H]: route in a graph, group token-expert pairs by expert on the host,
        run each used expert once over its rows (padded to EXPERT_ROWS buckets), sum the weighted results."""
        b, s, d = h.shape
        h2 = h.reshape(b * s, d)
        weights, ids = self.compiler.call("prefill", self.router_step(moe), h2, moe.gate.weight.value())
        weights, ids = weights.asnumpy(), ids.asnumpy()
        # One expert's slices of the stacked weights per call (a few MB each): `Parameter.value()` of the whole
        # [E, I, H] stack would copy it (293 MB per tensor at DeepSeek-OCR's size).
        experts = (moe.experts.gate_proj, moe.experts.up_proj, moe.experts.down_proj)
        out = np.zeros((b * s, d), np.float32)
        for e in np.unique(ids):
            tok, slot = np.nonzero(ids == e)
            rows = np.zeros(bucket(len(tok), EXPERT_ROWS), np.int32)
            rows[:len(tok)] = tok
            y = self.compiler.call("prefill", self.expert_step, h2, Tensor(rows),
                                   *[w[int(e)] for w in experts]).asnumpy()
            np.add.at(out, tok, y[:len(tok)] * weights[tok, slot, None])
        shared = moe.shared_experts
        y = self.compiler.call("prefill", self.shared_mlp_step, h2, shared.gate_proj.weight.value(),
                               shared.up_proj.weight.value(), shared.down_proj.weight.value())
        return (y + Tensor(out, y.dtype)).reshape(b, s, d)

    def router_step(self, moe):
        key = (moe.top_k, moe.scaling)
        if key not in self._router_steps:
            self._router_steps[key] = RouterStep(*key)
        return self._router_steps[key]

    def set_prefill_attention_block(self, rows):
        t = self.tspec
        step = DecoderQKNormPrefillLayerStep if t["qk_norm"] else DecoderPrefillLayerStep
        self.prefill_layer_step = step(t["heads"], t["kv_heads"], t["dim"], t["eps"], t["act"], rows, t["paired"])
        self.attention_prefill_step = DecoderAttentionPrefillStep(t["heads"], t["kv_heads"], t["dim"], t["eps"], rows,
                                                                  t["paired"])

    def prefill(self, prep, image_feats, max_new_tokens):
        """Fill the cache with the prompt; logits of its last token [1, V]."""
        s = prep.input_ids.shape[0]
        slots = self.plan_slots(s, max_new_tokens)
        self.reset_cache(1, slots)
        h = self._prefill_hidden(prep, image_feats, bucket(s, self.buckets.prefill), slots)
        return self.compiler.call("prefill", self.last_logits_step, h, Tensor(np.array([s - 1], np.int32)))

    def full_logits(self, prep, image_feats):
        """Logits at every prompt position [S, V] from a fresh cache (tests and dumps)."""
        s = prep.input_ids.shape[0]
        padded = bucket(s, self.buckets.prefill)
        slots = bucket(padded, self.buckets.slots)
        self.reset_cache(1, slots)
        h = self._prefill_hidden(prep, image_feats, padded, slots)
        return self.compiler.call("full_logits", self.all_logits_step, h).asnumpy()[0, :s]

    def decode(self, token, cache_pos, rope_delta, num_axes):
        ids = Tensor(np.array([[token]], np.int32))
        pos = Tensor(np.full((num_axes, 1, 1), cache_pos + rope_delta, np.int32))
        cpos = Tensor(np.array([[cache_pos]], np.int32))
        return self.compiler.call("decode", self.decode_step, ids, pos, cpos)
