"""Runs a loaded VLM Cell: shape buckets, per-request KV cache, compiled vision/prefill/decode steps.

Model-agnostic: a model package supplies the Cell (see ms_ocr/steps.py for the methods it needs) and
turns processor output into per-image vision inputs; this class owns everything shape- and cache-related.
"""

import time
from dataclasses import dataclass, field

import numpy as np
import mindspore as ms
from mindspore import Tensor, ops

from ms_ocr.compiler import CompileTimer
from ms_ocr.convert.loader import adopt, device_tensor
from ms_ocr.nn.blocks import forget_graph_input, graph_input
from ms_ocr.nn.functional import rows
from ms_ocr.ops import backend
from ms_ocr.processing.grid import bucket
from ms_ocr.steps import (AllLogitsStep, CacheWriteStep, DecodeHeadStep, DecodePrepStep, DecodeStep,
                          DecoderAttentionPrefillStep, DecoderPrefillLayerStep, DecoderQKNormPrefillLayerStep,
                          DenseLayerDecodeStep, ExpertsDecodeStep, ExpertsHeadStep, ExpertsMoELayerDecodeStep,
                          ExpertStep, GatedMLPStep, LastLogitsStep, MoELayerDecodeStep, PrefillPrepStep,
                          ReadOnlyDecodeStep, ReadOnlyRowsDecodeStep, RouterStep, VisionEmbedStep, VisionHeadStep, ViTAttentionInNoRopeStep,
                          ViTAttentionInStep, ViTBlockStep, WidenStep)

# Query rows per vision block call (attention + out projection + MLP of those rows): scores [H, 512, N]
# instead of [H, N, N] (0.8 GB instead of 2.5 GB at 4k patches) and MLP temporaries that fit the cache.
VISION_ATTENTION_CHUNK = 512
# Rows of one routed expert's prefill call are padded to a multiple of this (one compile per bucket).
EXPERT_ROWS = 32
# Prompt rows per prefill attention call; block i attends keys [0, (i+1)*chunk) only, skipping the masked
# upper triangle of the causal scores.
PREFILL_ATTENTION_CHUNK = 256


def host_tensor(array, float_dtype=ms.float32):
    """Host array -> Tensor: floats in `float_dtype`, integers as int32, booleans as they are."""
    array = np.asarray(array)
    if array.dtype == np.bool_:
        return Tensor(array)
    if np.issubdtype(array.dtype, np.floating):
        return Tensor(array.astype(np.float32), float_dtype)
    return Tensor(array.astype(np.int32))


def padded_rows(t, pad, axis):
    """A pool Tensor of its own holding `t` with `pad` zero rows appended along `axis` (0 or -2)."""
    a = t.asnumpy()
    if pad:
        width = [(0, 0)] * a.ndim
        width[axis] = (0, pad)
        a = np.pad(a, width)
    return device_tensor(a, t.dtype)


def release_weights(params):
    """Free Parameters' memory for good: each one's data becomes an empty Tensor, after the view graph_input keeps
    of it is dropped (a kept view holds the old buffer alive); the memory goes back to MindSpore's pool."""
    empty = Tensor(np.zeros(0, np.float32))
    for p in params:
        forget_graph_input(p)
        adopt(p, empty)


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
            self.vit_block_step = ViTBlockStep(vspec["dim"] ** -0.5, vspec["eps"], vspec["act"])
        self.widen_step = WidenStep()
        self.vision_attention_chunk = VISION_ATTENTION_CHUNK
        self.prefill_prep_step = PrefillPrepStep(model)
        tspec = model.text_layers()[0].spec
        self.tspec = tspec
        self.set_prefill_attention_block(PREFILL_ATTENTION_CHUNK)
        self.last_logits_step = LastLogitsStep(model)
        self.all_logits_step = AllLogitsStep(model)
        self.decode_step = DecodeStep(model)
        self.cache_write_step = CacheWriteStep(model)
        # Off Ascend the host writes the KV caches (numpy views of the cache Parameters) and the decode graphs
        # only read them: in a CPU graph a scatter_update into a cache Parameter, and a reshape of one, each
        # copy the whole tensor (~0.3 ms per 5 MB layer tensor; 15 of 122 ms per HunyuanOCR token).
        self.host_cache = not backend.FUSED
        self.read_only_decode_step = ReadOnlyDecodeStep(model)
        self.read_only_rows_decode_step = ReadOnlyRowsDecodeStep(model)
        self._cache_views = None
        self._cache_inputs = {}  # rows -> per layer (k, v) graph inputs over the first `rows` sequences
        self.cache_slots = self.cache_batch = 0
        self.expert_step = ExpertStep(tspec["act"])
        self.shared_mlp_step = GatedMLPStep(tspec["act"])
        self._router_steps = {}
        self._expert_views = {}
        moe = self._moe_cells = [layer.mlp for layer in model.text_layers() if layer.moe]
        # MoE decode off Ascend, one sequence: layer by layer with the experts routed on the host (see the
        # note above DecodePrepStep); batched decode and the fused (Ascend) kernels keep the whole-model graph
        self.host_moe_decode = bool(moe) and self.host_cache and not tspec["qk_norm"]
        if self.host_moe_decode:
            attn = (tspec["heads"], tspec["kv_heads"], tspec["dim"], tspec["eps"])
            self.decode_prep_step = DecodePrepStep(model)
            self.dense_decode_step = DenseLayerDecodeStep(*attn, tspec["act"], tspec["paired"])
            self.moe_decode_step = MoELayerDecodeStep(*attn, moe[0].top_k, moe[0].scaling, tspec["paired"])
            self.experts_decode_step = ExpertsDecodeStep(tspec["act"], moe[0].top_k)
            self.experts_moe_decode_step = ExpertsMoELayerDecodeStep(*attn, moe[0].top_k, moe[0].scaling,
                                                                     tspec["act"], tspec["paired"])
            self.experts_head_step = ExpertsHeadStep(model, tspec["act"], moe[0].top_k)
            self.decode_head_step = DecodeHeadStep(model)
        # Vision and prefill graphs are compiled per image size and prompt bucket; those the last two requests
        # did not use are freed (see CompileTimer.next_request). The decode graphs stay (one per cache size).
        self.compiler = CompileTimer(evictable=("vision", "prefill"))
        # Free the vision graphs (their compiled code and activation memory) as soon as a request's images are
        # encoded, so that they and the prefill graphs are never resident together: for a request whose image
        # size will not come back (infer sets it for its last image of each size). PaddleOCR-VL, bf16, one
        # 768 x 1,024 page (1,019 prompt tokens) on the CPU: peak RSS 3.84 -> 3.32 GB.
        self.release_vision_graphs = False
        # A one-request process (VLMPipeline with staged text weights) frees each ViT layer's weights as soon as the
        # layer has run: PaddleOCR-VL's 0.8 GB of bf16 ViT weights are gone before the vision head's activations
        # and the text weights are allocated.
        self.release_vision_layers = False

    # ---- vision -------------------------------------------------------------------------------
    def tensor(self, array):
        return host_tensor(array, self.compute_dtype)

    def encode_images(self, vision_inputs):
        """One request's per-image VisionInputs -> its image tokens Tensor [M, H] (kept on device)."""
        return self.encode_batch([vision_inputs])[0]

    def encode_batch(self, requests):
        """Several requests' VisionInputs lists -> image tokens per request (None where a request has none).

        Every image of every request goes through the ViT layers packed into one row block: the layer graphs
        (norms, projections, MLP) run once over all images; attention runs per image on its exact rows (no
        mask, no cross-image scores). Rows are not padded to buckets: measured at 3,996 patches, padding to
        4,096 plus slicing each image's keys out of the padded block made the vision tower ~15 % slower. Towers that are not a ViTLayer stack (DeepSeek-OCR) encode
        each request through the model's encode_views.
        """
        if hasattr(self.model, "encode_views"):
            out = [self.model.encode_views(self, v) if v else None for v in requests]
        else:
            feats = iter(self.vision_packed([item for v in requests for item in v]))
            out = []
            for v in requests:
                mine = [next(feats) for _ in v]
                out.append(None if not mine else mine[0] if len(mine) == 1 else ops.concat(mine, 0))
        if self.release_vision_graphs:
            out = [None if f is None else Tensor(f.asnumpy()) for f in out]  # own memory, not a freed graph's
            self.compiler.free_group("vision")
        return out

    def vision_packed(self, items):
        """Images through embed, the packed ViT layers and the per-image vision head: one Tensor per image."""
        if not items:
            return []
        x, spans = self.packed_tower(items)
        return [self.compiler.call("vision", self.vision_head_step, x[s:s + n], *[self.tensor(a) for a in item.head])
                for item, (s, n) in zip(items, spans)]

    def packed_tower(self, items):
        """Images' patch embeddings, concatenated, through every ViT layer: ([rows, C] before the model's vision
        head, each image's (start, n) rows).

        An image of n patches runs in ceil(n / vision_attention_chunk) blocks of equal size, its rows padded by
        fewer rows than there are blocks (zeros: finite through every layer; their keys and values are left
        out of the attention and their outputs are never read). One shape per image for each step, instead of
        full blocks plus a shorter last one: two graphs (and their activation memory) fewer per image size."""
        xs, images, offset = [], [], 0
        for item in items:
            out = self.compiler.call("vision", self.vision_embed_step, *[self.tensor(a) for a in item.embed])
            x, rope = (out[0], tuple(out[1:])) if isinstance(out, tuple) else (out, ())
            n = x.shape[0]
            count = -(-n // self.vision_attention_chunk)
            size = -(-n // count)
            pad = count * size - n
            if pad or self.release_vision_graphs:  # own memory: padded, or to outlive the graph freed below
                x = padded_rows(x, pad, 0)
                rope = tuple(padded_rows(r, pad, -2) for r in rope)
            # blocks of query rows, each with its rows of the rope tables ([.., N, D])
            spans = [(s, s + size) for s in range(0, count * size, size)]
            images.append((offset, n, [(offset + s, offset + e, tuple(rows(r, s, e, -2) for r in rope))
                                       for s, e in spans]))
            xs.append(x)
            offset += count * size
        if self.release_vision_graphs:
            # The embedding graph runs once per image, and its activation memory (0.55 GB for PaddleOCR-VL at
            # 3,996 patches: the [N, 4, C] position taps) would stay resident through every ViT layer: its
            # outputs were copied out above, and the graph is freed now.
            self.compiler.free_cell(self.vision_embed_step)
        x = xs[0] if len(xs) == 1 else ops.concat(xs, 0)
        for layer in self.model.vision_layers():
            x = self.vision_layer(layer, x, images)
            if self.release_vision_layers:
                release_weights(layer.get_parameters())
        return x, [(start, n) for start, n, _ in images]

    def vision_tower(self, item):
        """One image's patch embeddings through every ViT layer: [N, C] (before the model's vision head)."""
        x, [(start, n)] = self.packed_tower([item])
        return rows(x, start, start + n, 0)

    def vision_layer(self, layer, x, images):
        """One ViT layer over packed rows; images: per image (first row, patches, its blocks of rows (start, end,
        rope rows)).

        Every step runs per block of rows, one graph call each: norm + q/k/v + rope, then (once the image's
        keys and values are gathered) the block's attention over them, out projection and MLP. A block's
        activations stay small (at 512 rows the MLP's [rows, 4C] temporaries fit the CPU's cache) and no
        attention output is concatenated. Measured on PaddleOCR-VL at 3,996 patches against attention
        chunks between whole-image norm/projection and MLP graphs: vision 59.8 -> 50.6 s, peak RSS at vision
        5.84 -> 4.99 GB, features bit-identical."""
        in_weights, out_weights = layer.weights(layer.attn_in_names), layer.weights(layer.out_names)
        if self.compute_dtype == ms.float32 and any(w.dtype == ms.bfloat16 for w in in_weights + out_weights):
            # bf16-resident weights (device.bf16_resident): widened once for all of this layer's blocks
            in_weights = self.compiler.call("vision", self.widen_step, *in_weights)
            out_weights = self.compiler.call("vision", self.widen_step, *out_weights)
        parts = []
        for _, n, blocks in images:
            qkv = [self.compiler.call("vision", self.vit_in_step, rows(x, s, e, 0), *rope, *in_weights)
                   for s, e, rope in blocks]
            # the keys and values of the image's rows (not of its padding rows), contiguous: a sliced view as a
            # graph input made the blocks' attention 1.6x slower
            last = n - blocks[-1][0] + blocks[0][0]  # real rows of the last block
            k, v = ([t[i] for t in qkv[:-1]] + [rows(qkv[-1][i], 0, last, -2)] for i in (1, 2))
            k, v = (k[0] if len(k) == 1 else ops.concat(k, 2)), (v[0] if len(v) == 1 else ops.concat(v, 2))
            parts += [self.compiler.call("vision", self.vit_block_step, q, k, v, rows(x, s, e, 0), *out_weights)
                      for (s, e, _), (q, _, _) in zip(blocks, qkv)]
        return parts[0] if len(parts) == 1 else ops.concat(parts, 0)

    # ---- cache --------------------------------------------------------------------------------
    def plan_slots(self, prompt_len, max_new_tokens):
        need = prompt_len + max_new_tokens
        if need > self.max_positions:
            raise RequestTooLong(f"prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                                 f"the model's max_position_embeddings ({self.max_positions})")
        padded = bucket(prompt_len, self.buckets.prefill)
        return bucket(max(need, padded), self.buckets.slots)

    def reset_cache(self, batch, slots, host_writes=None):
        """Size the caches for this request (and zero them: stale NaNs would poison masked slots).
        host_writes (default: self.host_cache) lays them out [B, Hkv, T, D] for the host to write and keeps
        numpy views of them; False keeps the in-graph layout (DecodeStep, the exported text graph)."""
        host = self.host_cache if host_writes is None else host_writes
        self.model.allocate_cache(batch, slots, self.compute_dtype, flat=not host)
        self.cache_slots, self.cache_batch = slots, batch
        # a CPU Parameter's asnumpy() is its own buffer: writes through it are what the next graph reads
        self._cache_views = [(layer.self_attn.k_cache.asnumpy(), layer.self_attn.v_cache.asnumpy())
                             for layer in self.model.text_layers()] if host else None
        self._cache_inputs = {}

    def cache_inputs(self, rows):
        """Per layer (k, v) Tensors sharing memory with the first `rows` sequence rows of the host-written
        caches (rows are the leading axis, so the views are contiguous): the graph inputs of the shared layer
        graphs of _decode_host_moe and of a decode step over fewer rows than the cache holds."""
        if rows not in self._cache_inputs:
            self._cache_inputs[rows] = [(Tensor.from_numpy(k[:rows]), Tensor.from_numpy(v[:rows]))
                                        for k, v in self._cache_views]
        return self._cache_inputs[rows]

    def move_cache_row(self, src, dst):
        """Copy sequence row `src` of every layer's host-written cache to row `dst` (the batch engine keeps
        its running sequences in the first rows, so a step can decode just those)."""
        for k, v in self._cache_views:
            k[dst] = k[src]
            v[dst] = v[src]

    def store_kv(self, index, k, v, cache_rows, cache_pos):
        """Write layer `index`'s new k, v [B', Hkv, S, D] (numpy) at positions cache_pos.. of the cache's
        sequence slots cache_rows [B'] (host-written caches)."""
        k_view, v_view = self._cache_views[index]
        s = k.shape[2]
        for i, (row, pos) in enumerate(zip(cache_rows, cache_pos)):
            k_view[row, :, pos:pos + s] = k[i]
            v_view[row, :, pos:pos + s] = v[i]

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
            image_feats = rows[0] if len(rows) == 1 else ops.concat(rows, 0)
        return Tensor(ids), image_feats, Tensor(image_index), Tensor(pos)

    def _prefill_hidden(self, preps, feats, padded_len, slots, cache_rows):
        """Run the prompts [B, padded_len] through every layer (shared layer graphs), writing each layer's k/v
        to the cache rows of sequence slots `cache_rows` (one per prompt) of a cache of `slots` positions."""
        ids, image_feats, image_index, pos = self._prefill_args(preps, feats, padded_len)
        x, cos, sin = self.compiler.call("prefill", self.prefill_prep_step, ids, image_feats, image_index, pos)
        ks, vs = [], []
        for index, layer in enumerate(self.model.text_layers()):
            if layer.moe:
                x, h, k, v = self.compiler.call("prefill", self.attention_prefill_step, x, cos, sin,
                                                *layer.weights(layer.weight_names))
                # Ascend: the MoE Cell's fused dispatch in a graph; elsewhere the host groups the experts' rows
                if backend.FUSED:
                    x = x + self.compiler.call("prefill", layer.mlp, h)
                else:
                    x = x + self.moe_prefill(layer.mlp, h)
            else:
                x, k, v = self.compiler.call("prefill", self.prefill_layer_step, x, cos, sin,
                                             *layer.weights(layer.weight_names))
            if self._cache_views is not None:  # host-written caches: store now, keep nothing
                self.store_kv(index, k.asnumpy(), v.asnumpy(), cache_rows, [0] * len(cache_rows))
            else:
                ks.append(k)
                vs.append(v)
        if self._cache_views is None:
            kv_heads = self.model.num_kv_heads
            heads = np.asarray(cache_rows, np.int32)[:, None] * kv_heads + np.arange(kv_heads, dtype=np.int32)[None]
            write_idx = Tensor((heads[:, :, None] * slots + np.arange(padded_len, dtype=np.int32)).reshape(-1))
            rows = Tensor(np.arange(self.model.text_layers()[0].self_attn.k_cache.shape[0], dtype=np.int32))
            self.compiler.call("prefill", self.cache_write_step, write_idx, ops.stack(ks), ops.stack(vs), rows)
        return x

    def moe_prefill(self, moe, h):
        """MoE FFN over a prompt h [1, S, H]: route in a graph, group token-expert pairs by expert on the host,
        run each used expert once over its rows (padded to EXPERT_ROWS buckets), sum the weighted results."""
        b, s, d = h.shape
        h2 = h.reshape(b * s, d)
        weights, ids = self.compiler.call("prefill", self.router_step(moe), h2, graph_input(moe.gate.weight))
        weights, ids = weights.asnumpy(), ids.asnumpy()
        gates, ups, downs, shared = self.expert_views(moe)
        out = np.zeros((b * s, d), np.float32)
        for e in np.unique(ids):
            tok, slot = np.nonzero(ids == e)
            rows = np.zeros(bucket(len(tok), EXPERT_ROWS), np.int32)
            rows[:len(tok)] = tok
            y = self.compiler.call("prefill", self.expert_step, h2, Tensor(rows), gates[e], ups[e],
                                   downs[e]).asnumpy()
            # a token picks an expert at most once, so `tok` has no repeats: a plain indexed add (np.add.at,
            # the unbuffered form, took 0.9 s of a 9.6 s DeepSeek-OCR-2 prefill) does the same additions
            out[tok] += y[:len(tok)] * weights[tok, slot, None]
        y = self.compiler.call("prefill", self.shared_mlp_step, h2, *shared)
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
        """Fill a fresh one-sequence cache with the prompt; logits of its last token [1, V]."""
        slots = self.plan_slots(prep.input_ids.shape[0], max_new_tokens)
        self.reset_cache(1, slots)
        return self.prefill_batch([prep], [image_feats], [0], slots)

    def prefill_batch(self, preps, feats, cache_rows, slots):
        """Prefill several prompts at once into sequence slots `cache_rows` of the current cache (sized by
        reset_cache(batch, slots)); logits of each prompt's last token [len(preps), V]."""
        self.compiler.next_request()
        lengths = [p.input_ids.shape[0] for p in preps]
        padded = bucket(max(lengths), self.buckets.prefill)
        if padded > slots:
            raise RequestTooLong(f"prompt of {max(lengths)} tokens does not fit a cache of {slots} positions")
        h = self._prefill_hidden(preps, feats, padded, slots, cache_rows)
        return self.compiler.call("prefill", self.last_logits_step, h, Tensor(np.array(lengths, np.int32) - 1))

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
        batch (host-written caches only) reads just those rows."""
        cache_pos = np.asarray(cache_pos, np.int32)
        pos = np.broadcast_to((cache_pos + np.asarray(rope_delta, np.int32))[None, :, None],
                              (num_axes, len(tokens), 1))
        args = (Tensor(np.asarray(tokens, np.int32)[:, None]), Tensor(np.ascontiguousarray(pos)),
                Tensor(cache_pos[:, None]), Tensor(np.arange(self.cache_slots, dtype=np.int32)))
        if self._cache_views is None:
            return self.compiler.call("decode", self.decode_step, *args)
        if self.host_moe_decode and len(tokens) == 1 and not any(m.dense for m in self._moe_cells):
            return self._decode_host_moe(cache_pos, *args)
        if len(tokens) < self.cache_batch:  # the first len(tokens) sequence rows only
            caches = [t for kv in self.cache_inputs(len(tokens)) for t in kv]
            logits, ks, vs = self.compiler.call("decode", self.read_only_rows_decode_step, *args, *caches)
        else:
            logits, ks, vs = self.compiler.call("decode", self.read_only_decode_step, *args)
        ks, vs, seqs = ks.asnumpy(), vs.asnumpy(), range(len(tokens))
        for i in range(len(ks)):
            self.store_kv(i, ks[i], vs[i], seqs, cache_pos)
        return logits

    def _decode_host_moe(self, cache_pos, *args):
        """decode_batch for one sequence of an MoE model off Ascend: each layer's graph up to its router, then
        the k selected experts (zero-copy views of the stacked weights) and shared experts. An MoE layer's
        experts run in the same graph call as the next MoE layer's attention and router, or as the head."""
        x, cos, sin, mask = self.compiler.call("decode", self.decode_prep_step, *args)
        pending = ()  # (h, routing weights, expert weight views) of an MoE layer whose experts have not run
        caches = self.cache_inputs(1)
        for i, layer in enumerate(self.model.text_layers()):
            inputs = (x, cos, sin, mask) + caches[i] + layer.weights(layer.weight_names)
            if not layer.moe:
                if pending:
                    x = self.compiler.call("decode", self.experts_decode_step, x, *pending)
                    inputs, pending = (x,) + inputs[1:], ()
                x, k, v = self.compiler.call("decode", self.dense_decode_step, *inputs)
                self.store_kv(i, k.asnumpy(), v.asnumpy(), (0,), cache_pos)
                continue
            gate_w = graph_input(layer.mlp.gate.weight)
            if pending:
                x, h, weights, ids, k, v = self.compiler.call("decode", self.experts_moe_decode_step, x, *pending,
                                                              *inputs[1:], gate_w)
            else:
                x, h, weights, ids, k, v = self.compiler.call("decode", self.moe_decode_step, *inputs, gate_w)
            self.store_kv(i, k.asnumpy(), v.asnumpy(), (0,), cache_pos)
            gates, ups, downs, shared = self.expert_views(layer.mlp)
            chosen = [int(e) for e in ids.asnumpy()[0]]
            pending = (h, weights, *[gates[e] for e in chosen], *[ups[e] for e in chosen],
                       *[downs[e] for e in chosen], *shared)
        if pending:
            return self.compiler.call("decode", self.experts_head_step, x, *pending)
        return self.compiler.call("decode", self.decode_head_step, x)

    def expert_views(self, moe):
        """Per-expert Tensors sharing memory with MoE cell `moe`'s stacked expert Parameters (off Ascend, no
        copy: a CPU Parameter's asnumpy() is its own buffer, and Tensor.from_numpy keeps it; slicing the
        Parameter would copy each expert, and its value() would copy the whole stack, 293 MB per tensor at
        DeepSeek-OCR's size), plus the shared experts' weights. Made once per buffer, like graph_input's views:
        rebuilt if set_data replaced a stack (a kept view would read the freed buffer)."""
        stacks = (moe.experts.gate_proj, moe.experts.up_proj, moe.experts.down_proj)
        ptrs = tuple(p.data_ptr() if hasattr(p, "data_ptr") else None for p in stacks)
        known = self._expert_views.get(id(moe))
        if known is None or known[0] != ptrs:
            views = [[Tensor.from_numpy(a[e]) for e in range(a.shape[0])] for a in (p.asnumpy() for p in stacks)]
            self._expert_views[id(moe)] = known = (ptrs, views)
        shared = moe.shared_experts
        return known[1] + [tuple(graph_input(w) for w in (shared.gate_proj.weight, shared.up_proj.weight,
                                                          shared.down_proj.weight))]
