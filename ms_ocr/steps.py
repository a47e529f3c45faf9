"""Graph entry points shared by the VLMs.

Vision and prefill run layer by layer through one compiled graph per layer type (weights are graph
inputs), which bounds activation memory to one layer and compiles once; decode runs as one whole graph
over the KV cache (tiny activations, one launch per token; one sequence of an MoE model off Ascend runs it
layer by layer, see the decode steps at the end). Off Ascend the decode graphs only read the caches and
return each token's k/v, which the host stores (ReadOnlyDecodeStep). A model Cell provides:
  vision_embed(*inputs) -> (x, cos, sin) with vision rope, or x without; vision_layers (ViTLayer);
  vision_head(x, *inputs) -> image tokens;
  embed(input_ids); text_rotary(pos) -> (cos, sin); text_layers; text(x, pos, cache_pos, slot_ids) (cached,
  whole); text_read_only(...) and text_read_only_inputs(...) -> (cos, sin, mask) (the same over read-only
  caches); final_norm(h); logits(h); num_kv_heads.
Wrappers use auto_prefix=False so they never rename the model's parameters. Layer weights are explicit
positional inputs: MindSpore 2.7 rejects *args in construct, and 2.10 folds a tuple argument into the
graph as a constant (a new compile and activation pool per layer).
"""

import mindspore as ms
from mindspore import ParameterTuple, nn, ops

from ms_ocr import ops as K
from ms_ocr.nn import functional as F
from ms_ocr.nn.moe import route
from ms_ocr.ops import decode_layer


class _Wrap(nn.Cell):
    def __init__(self, model):
        super().__init__(auto_prefix=False)
        self.model = model


class VisionEmbedStep(_Wrap):
    def construct(self, *inputs):
        return self.model.vision_embed(*inputs)


class ViTAttentionInStep(nn.Cell):
    """Any ViT layer's norm1 + q/k/v + 2D rope; weights in F.VIT_ATTN_IN_ROLES order."""

    def __init__(self, heads, eps):
        super().__init__()
        self.heads, self.eps = heads, eps

    def construct(self, x, cos, sin, ln1w, ln1b, qw, qb, kw, kb, vw, vb):
        return F.vit_attention_in(x, cos, sin, (ln1w, ln1b, qw, qb, kw, kb, vw, vb), self.heads, self.eps)


class ViTAttentionInNoRopeStep(nn.Cell):
    """The same for ViTs without rope (position table only, e.g. HunyuanOCR)."""

    def __init__(self, heads, eps):
        super().__init__()
        self.heads, self.eps = heads, eps

    def construct(self, x, ln1w, ln1b, qw, qb, kw, kb, vw, vb):
        return F.vit_attention_in(x, None, None, (ln1w, ln1b, qw, qb, kw, kb, vw, vb), self.heads, self.eps)


class ViTBlockStep(nn.Cell):
    """The rest of any ViT layer for a block of query rows: their attention over all keys, then the out
    projection + residual + MLP. q [1, H, n, D], k/v [1, H, N, D], x [n, C] the block's input rows; weights in
    F.VIT_OUT_ROLES order."""

    def __init__(self, scale, eps, act):
        super().__init__()
        self.scale, self.eps, self.act = scale, eps, act
        self.act_role = K.epilogue_role(act)

    def construct(self, q, k, v, x, ow, ob, ln2w, ln2b, f1w, f1b, f2w, f2b):
        attn = K.attention_rows(q, k, v, self.scale, bf16_ok=True)
        return F.vit_out_mlp(x, attn, (ow, ob, ln2w, ln2b, f1w, f1b, f2w, f2b), self.eps, self.act, self.act_role)


class WidenStep(nn.Cell):
    """A layer's weights in fp32, bf16 ones widened (K.widen), in one graph call: the vision layers of a bf16
    checkpoint kept in bf16 on the CPU, widened once per layer for the per-block ViT steps (the outputs are the
    graph's, freed when the layer is done: one layer's fp32 weights exist at a time)."""

    def construct(self, *weights):
        return tuple(K.widen(w, ms.float32) for w in weights)


class DequantStep(nn.Cell):
    """int8 matrices with their per-row scales (q1, s1, q2, s2, ...) as fp32 (K.dequant_q8), in one graph call:
    the prefill of a layer quantised by --quantize int8 (one layer's fp32 matrices exist at a time)."""

    def construct(self, *pairs):
        return tuple(K.dequant_q8(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2))


class VisionHeadStep(_Wrap):
    def construct(self, x, *inputs):
        return self.model.vision_head(x, *inputs)


def merge_image_features(embeds, image_feats, image_index):
    """Put image feature row image_index[b, s] at every position where it is >= 0."""
    picked = ops.gather(image_feats, ops.maximum(image_index, 0), 0)  # [B, S, H]
    keep = ops.broadcast_to((image_index >= 0)[..., None], embeds.shape)
    return ops.select(keep, picked.astype(embeds.dtype), embeds)


class PrefillPrepStep(_Wrap):
    """Embeddings with the image tokens merged in, and the rope tables of the prompt."""

    def construct(self, input_ids, image_feats, image_index, pos):
        x = merge_image_features(self.model.embed(input_ids), image_feats, image_index)
        cos, sin = self.model.text_rotary(pos)
        return x, cos, sin


class DecoderPrefillLayerStep(nn.Cell):
    """Any decoder layer over a whole prompt (weights are inputs, DecoderLayer.weight_names order);
    returns the output and the layer's k, v for the cache. Prompt activations are small enough for one graph."""

    def __init__(self, heads, kv_heads, dim, eps, act, block, paired=True):
        super().__init__()
        self.heads, self.kv_heads, self.dim, self.eps, self.act, self.block = heads, kv_heads, dim, eps, act, block
        self.paired = paired

    def construct(self, x, cos, sin, inw, qw, kw, vw, ow, postw, gw, uw, dw):
        return F.decoder_layer_prefill(x, cos, sin, (inw, qw, kw, vw, ow, postw, gw, uw, dw), self.heads,
                                       self.kv_heads, self.dim, self.eps, self.act, self.block, self.paired)


class DecoderQKNormPrefillLayerStep(DecoderPrefillLayerStep):
    """The same for layers with q/k norms after the rope (HunYuan)."""

    def construct(self, x, cos, sin, inw, qw, kw, vw, qnw, knw, ow, postw, gw, uw, dw):
        return F.decoder_layer_prefill(x, cos, sin, (inw, qw, kw, vw, qnw, knw, ow, postw, gw, uw, dw), self.heads,
                                       self.kv_heads, self.dim, self.eps, self.act, self.block, self.paired)


class DecoderAttentionPrefillStep(nn.Cell):
    """The attention half of an MoE decoder layer over a whole prompt (F.decoder_attention_prefill)."""

    def __init__(self, heads, kv_heads, dim, eps, block, paired=True):
        super().__init__()
        self.heads, self.kv_heads, self.dim, self.eps, self.block, self.paired = heads, kv_heads, dim, eps, block, paired

    def construct(self, x, cos, sin, inw, qw, kw, vw, ow, postw):
        return F.decoder_attention_prefill(x, cos, sin, (inw, qw, kw, vw, ow, postw), self.heads, self.kv_heads,
                                           self.dim, self.eps, self.block, self.paired)


class RouterStep(nn.Cell):
    """MoE routing of h [T, H]: (weights [T, k], expert ids [T, k])."""

    def __init__(self, top_k, scaling):
        super().__init__()
        self.top_k, self.scaling = top_k, scaling

    def construct(self, h, gate_w):
        return route(h, gate_w, self.top_k, self.scaling)


class ExpertStep(nn.Cell):
    """One routed expert (its gate/up/down weights) over rows `rows` of h [T, H]; int8 weights (--quantize int8)
    with their scales after them, dequantised here."""

    def __init__(self, act):
        super().__init__()
        self.act = act

    def construct(self, h, rows, gw, uw, dw, *scales):
        if scales:
            gw, uw, dw = K.dequant_q8(gw, scales[0]), K.dequant_q8(uw, scales[1]), K.dequant_q8(dw, scales[2])
        return F.gated_mlp(ops.gather(h, rows, 0), gw, uw, dw, self.act)


class GatedMLPStep(nn.Cell):
    """A gated MLP given its weights (MoE shared experts)."""

    def __init__(self, act):
        super().__init__()
        self.act = act

    def construct(self, h, gw, uw, dw):
        return F.gated_mlp(h, gw, uw, dw, self.act)


class CacheWriteStep(nn.Cell):
    """Store every layer's prompt k, v ([L, B, Hkv, S, D] stacked) at rows write_idx of the layers' [B*Hkv*T, D]
    caches, in place, in one graph.

    A graph, not eager scatter_updates: MindSpore 2.10's eager kernel keeps the cache's first size and fails
    ("kernel mod output size not equal to device_address size") once the cache is resized. One graph holding
    all caches as attributes, not one call per layer with the caches as inputs: each new Parameter input
    compiles a new graph (per layer and prompt bucket). `rows` = arange(B*Hkv*T) keys the graph
    on the cache size, which a graph does not notice when the Parameters are resized."""

    def __init__(self, model):
        super().__init__(auto_prefix=False)
        attns = [layer.self_attn for layer in model.text_layers()]
        self.k_caches = ParameterTuple([a.k_cache for a in attns])
        self.v_caches = ParameterTuple([a.v_cache for a in attns])
        self.count = len(attns)

    def construct(self, write_idx, ks, vs, rows):
        d = ks.shape[-1]
        # split, not ks[i]: MindSpore's CPU StridedSlice is slow on an index that keeps other axes whole
        # (Split copies each part in one pass)
        k_parts, v_parts = ops.split(ks, 1, 0), ops.split(vs, 1, 0)
        for i in range(self.count):
            ops.scatter_update(self.k_caches[i], write_idx, k_parts[i].reshape(-1, d).astype(self.k_caches[i].dtype))
            ops.scatter_update(self.v_caches[i], write_idx, v_parts[i].reshape(-1, d).astype(self.v_caches[i].dtype))
        return rows


class LastLogitsStep(_Wrap):
    """Final norm + head for each sequence's last real token: [B, S, C], last_idx [B] -> [B, V]."""

    def construct(self, h, last_idx):
        b, s, d = h.shape
        rows = ops.arange(b, dtype=ms.int32) * s + last_idx.astype(ms.int32)
        return self.model.logits(self.model.final_norm(ops.gather(h.reshape(b * s, d), rows, 0)))


class AllLogitsStep(_Wrap):
    """Final norm + head at every position: [B, S, C] -> [B, S, V] (parity tests, dumps)."""

    def construct(self, h):
        b, s, d = h.shape
        return self.model.logits(self.model.final_norm(h.reshape(b * s, d))).reshape(b, s, -1)


class DecodeStep(_Wrap):
    """One new token per sequence over the cache: input_ids [B, 1], pos [A, B, 1], cache_pos [B, 1],
    slot_ids = arange(T) (T positions per sequence in the cache)."""

    def construct(self, input_ids, pos, cache_pos, slot_ids):
        h = self.model.text(self.model.embed(input_ids), pos, cache_pos, slot_ids)
        return self.model.logits(self.model.final_norm(h[:, 0]))


class ReadOnlyDecodeStep(_Wrap):
    """DecodeStep over caches the graph only reads (allocated flat=False; off Ascend): logits [B, V] and every
    layer's k, v [L, B, Hkv, 1, D], which the host stores at cache_pos (VLMRuntime.store_kv)."""

    def construct(self, input_ids, pos, cache_pos, slot_ids):
        h, ks, vs = self.model.text_read_only(self.model.embed(input_ids), pos, cache_pos, slot_ids)
        return self.model.logits(self.model.final_norm(h[:, 0])), ks, vs


class ReadOnlyRowsDecodeStep(_Wrap):
    """ReadOnlyDecodeStep over the first B sequence rows of the caches, which come in as graph inputs
    (k0, v0, k1, v1, ...: zero-copy views of the host-written cache Parameters): a batch engine with fewer
    sequences running than its cache holds decodes only those rows (VLMRuntime.decode_batch)."""

    def construct(self, input_ids, pos, cache_pos, slot_ids, *caches):
        h, ks, vs = self.model.text_read_only(self.model.embed(input_ids), pos, cache_pos, slot_ids, caches)
        return self.model.logits(self.model.final_norm(h[:, 0])), ks, vs


# ---- decode with host-routed experts (MoE models off Ascend, one sequence) ---------------------------------
# The whole-model DecodeStep gathers each token's k experts' weights in the graph (MoE.construct): on CPU
# that gather copies the chosen experts' weights per layer and token, and the copies plus the products over them
# were most of a token's time (profiler). Routed on the host instead, the selected experts' weights go into a graph
# as zero-copy views of the stacked Parameters, and the products read them in place. The layers share two
# graphs (dense, MoE up to the router) with weights and KV caches as inputs: one graph per layer, owning its
# cache Parameters, compiled far longer.

class DecodePrepStep(_Wrap):
    """Embedding, rope tables and mask of one read-only decode step (ReadOnlyDecodeStep's inputs)."""

    def construct(self, input_ids, pos, cache_pos, slot_ids):
        cos, sin, mask = self.model.text_read_only_inputs(pos, cache_pos, slot_ids)
        return self.model.embed(input_ids), cos, sin, mask


class DenseLayerDecodeStep(nn.Cell):
    """A dense decoder layer's read-only cached step for one token, shared by every such layer: weights
    (DecoderLayer.weight_names order) and the layer's caches [B, Hkv, T, D] are inputs (the caches as zero-copy
    views of the host-written Parameters). Returns x and this token's k, v [B, Hkv, 1, D] for the host."""

    def __init__(self, heads, kv_heads, dim, eps, act, paired=True):
        super().__init__()
        self.heads, self.kv_heads, self.dim, self.eps, self.act, self.paired = heads, kv_heads, dim, eps, act, paired
        self.silu_mlp = act is K.silu

    def construct(self, x, cos, sin, mask, k_cache, v_cache, inw, qw, kw, vw, ow, postw, gw, uw, dw):
        weights = (inw, qw, kw, vw, ow, postw, gw, uw, dw)
        if decode_layer.available(x, k_cache, weights, self.silu_mlp):
            return decode_layer.decoder_layer_decode(x, cos, sin, mask, k_cache, v_cache, weights, self.eps)
        x, h, k, v = F.decoder_attention_decode(x, cos, sin, mask, k_cache, v_cache, (inw, qw, kw, vw, ow, postw),
                                                self.heads, self.kv_heads, self.dim, self.eps, self.paired)
        return x + F.gated_mlp(h, gw, uw, dw, self.act), k, v


class MoELayerDecodeStep(nn.Cell):
    """The same for an MoE decoder layer up to its router (gate_w = mlp.gate.weight): residual stream x,
    normed h [B, 1, H], routing weights and expert ids [B, k], and this token's k, v."""

    def __init__(self, heads, kv_heads, dim, eps, top_k, scaling, paired=True):
        super().__init__()
        self.heads, self.kv_heads, self.dim, self.eps, self.paired = heads, kv_heads, dim, eps, paired
        self.top_k, self.scaling = top_k, scaling

    def construct(self, x, cos, sin, mask, k_cache, v_cache, inw, qw, kw, vw, ow, postw, gate_w):
        return self.attend_route(x, cos, sin, mask, k_cache, v_cache, inw, qw, kw, vw, ow, postw, gate_w)

    def attend_route(self, x, cos, sin, mask, k_cache, v_cache, inw, qw, kw, vw, ow, postw, gate_w):
        x, h, k, v = F.decoder_attention_decode(x, cos, sin, mask, k_cache, v_cache, (inw, qw, kw, vw, ow, postw),
                                                self.heads, self.kv_heads, self.dim, self.eps, self.paired)
        weights, ids = route(h.reshape(-1, h.shape[-1]), gate_w, self.top_k, self.scaling)
        return x, h, weights, ids, k, v


def experts_ffn(x, h, weights, expert_weights, top_k, act):
    """x + the shared experts of h + sum_j weights[:, j] * expert_j(h) for k experts given as weights:
    h [1, 1, H], weights [1, k]; expert_weights = k gate, then k up, then k down projections, then the shared
    experts' gate, up, down."""
    k = top_k
    hs = h.reshape(-1, h.shape[-1])
    ys = [F.gated_mlp(hs, expert_weights[j], expert_weights[k + j], expert_weights[2 * k + j], act)
          for j in range(k)]
    y = (ops.stack(ys, 1) * weights.astype(hs.dtype)[..., None]).sum(1)  # [1, k, H] -> [1, H]
    shared = F.gated_mlp(hs, expert_weights[3 * k], expert_weights[3 * k + 1], expert_weights[3 * k + 2], act)
    return x + (y + shared).reshape(x.shape)


class ExpertsDecodeStep(nn.Cell):
    """An MoE layer's experts for one token (experts_ffn) as a graph of its own."""

    def __init__(self, act, top_k):
        super().__init__()
        self.act, self.top_k = act, top_k

    def construct(self, x, h, weights, *expert_weights):
        return experts_ffn(x, h, weights, expert_weights, self.top_k, self.act)


class ExpertsMoELayerDecodeStep(MoELayerDecodeStep):
    """One MoE layer's experts (experts_ffn) and the next MoE layer up to its router in one graph, shared by
    every such pair: inputs x, h, weights, the 3k + 3 expert weights, then MoELayerDecodeStep's inputs after x.
    The host-routed decode made two graph calls per MoE layer (25 per DeepSeek-OCR-2 token, each with its launch
    cost); pairing them leaves 14 calls, a shorter step with bit-identical logits."""

    def __init__(self, heads, kv_heads, dim, eps, top_k, scaling, act, paired=True):
        super().__init__(heads, kv_heads, dim, eps, top_k, scaling, paired)
        self.act = act

    def construct(self, x, h, weights, *rest):
        n = 3 * self.top_k + 3
        x = experts_ffn(x, h, weights, rest[:n], self.top_k, self.act)
        return self.attend_route(x, *rest[n:])


class ExpertsHeadStep(_Wrap):
    """The last MoE layer's experts (experts_ffn), final norm and head: logits [1, V]."""

    def __init__(self, model, act, top_k):
        super().__init__(model)
        self.act, self.top_k = act, top_k

    def construct(self, x, h, weights, *expert_weights):
        x = experts_ffn(x, h, weights, expert_weights, self.top_k, self.act)
        return self.model.logits(self.model.final_norm(x[:, 0]))


class DecodeHeadStep(_Wrap):
    """Final norm + head of a decode step's hidden states [B, 1, H] -> [B, V]."""

    def construct(self, x):
        return self.model.logits(self.model.final_norm(x[:, 0]))
