"""Graph entry points of vision and prefill, shared by the VLMs (the decode step: ms_ocr/runtime/decode.py; the
host-routed MoE's: ms_ocr/runtime/moe.py).

Vision and prefill run layer by layer through one compiled graph per layer type (weights are graph inputs), which
bounds activation memory to one layer and compiles once. What a model Cell provides them is stated in
ms_ocr/interfaces.py. A step that wraps the model computes with the kernels bound to it; a step over weights given
as inputs is handed the kernels (`kernels`, ms_ocr/ops/kernels.py) when it is made.
Wrappers use auto_prefix=False so they never rename the model's parameters. Layer weights are explicit
positional inputs: MindSpore 2.7 rejects *args in construct, and 2.10 folds a tuple argument into the
graph as a constant (a new compile and activation pool per layer).
"""

import mindspore as ms
from mindspore import ParameterTuple, nn, ops

from ms_ocr import ops as K
from ms_ocr.nn import functional as F


class _Wrap(nn.Cell):
    def __init__(self, model):
        super().__init__(auto_prefix=False)
        self.model = model


class _Step(nn.Cell):
    """A step over weights given as inputs, computing with `kernels`."""

    def __init__(self, kernels):
        super().__init__()
        self.kernels = kernels


class VisionEmbedStep(_Wrap):
    def construct(self, *inputs):
        return self.model.vision_embed(*inputs)


class ViTAttentionInStep(_Step):
    """Any ViT layer's norm1 + q/k/v + 2D rope; weights in F.VIT_ATTN_IN_ROLES order."""

    def __init__(self, kernels, heads, eps):
        super().__init__(kernels)
        self.heads, self.eps = heads, eps

    def construct(self, x, cos, sin, ln1w, ln1b, qw, qb, kw, kb, vw, vb):
        return F.vit_attention_in(self.kernels, x, cos, sin, (ln1w, ln1b, qw, qb, kw, kb, vw, vb), self.heads,
                                  self.eps)


class ViTAttentionInNoRopeStep(ViTAttentionInStep):
    """The same for ViTs without rope (position table only, e.g. HunyuanOCR)."""

    def construct(self, x, ln1w, ln1b, qw, qb, kw, kb, vw, vb):
        return F.vit_attention_in(self.kernels, x, None, None, (ln1w, ln1b, qw, qb, kw, kb, vw, vb), self.heads,
                                  self.eps)


class ViTBlockStep(_Step):
    """The rest of any ViT layer for a block of query rows: their attention over all keys, then the out
    projection + residual + MLP. q [1, H, n, D], k/v [1, H, N, D], x [n, C] the block's input rows; weights in
    F.VIT_OUT_ROLES order."""

    def __init__(self, kernels, scale, eps, act):
        super().__init__(kernels)
        self.scale, self.eps, self.act = scale, eps, act
        self.act_role = K.epilogue_role(act)

    def construct(self, q, k, v, x, ow, ob, ln2w, ln2b, f1w, f1b, f2w, f2b):
        attn = K.attention_rows(self.kernels, q, k, v, self.scale, bf16_ok=True)
        return F.vit_out_mlp(self.kernels, x, attn, (ow, ob, ln2w, ln2b, f1w, f1b, f2w, f2b), self.eps, self.act,
                             self.act_role)


class WidenStep(_Step):
    """A layer's weights in fp32, bf16 ones widened (K.widen), in one graph call: the vision layers of a bf16
    checkpoint kept in bf16 on the CPU, widened once per layer for the per-block ViT steps (the outputs are the
    graph's, freed when the layer is done: one layer's fp32 weights exist at a time)."""

    def construct(self, *weights):
        return tuple(K.widen(self.kernels, w, ms.float32) for w in weights)


class DequantStep(_Step):
    """int8 matrices with their per-row scales (q1, s1, q2, s2, ...) as fp32 (K.dequant_q8), in one graph call:
    the prefill of a layer quantised by --quantize int8 (one layer's fp32 matrices exist at a time)."""

    def construct(self, *pairs):
        return tuple(K.dequant_q8(self.kernels, pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2))


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


class DecoderPrefillLayerStep(_Step):
    """Any decoder layer over a whole prompt (weights are inputs, DecoderLayer.weight_names order);
    returns the output and the layer's k, v for the cache. Prompt activations are small enough for one graph."""

    def __init__(self, kernels, heads, kv_heads, dim, eps, act, block, paired=True):
        super().__init__(kernels)
        self.heads, self.kv_heads, self.dim, self.eps, self.act, self.block = heads, kv_heads, dim, eps, act, block
        self.paired = paired

    def construct(self, x, cos, sin, inw, qw, kw, vw, ow, postw, gw, uw, dw):
        return F.decoder_layer_prefill(self.kernels, x, cos, sin, (inw, qw, kw, vw, ow, postw, gw, uw, dw), self.heads,
                                       self.kv_heads, self.dim, self.eps, self.act, self.block, self.paired)


class DecoderQKNormPrefillLayerStep(DecoderPrefillLayerStep):
    """The same for layers with q/k norms after the rope (HunYuan)."""

    def construct(self, x, cos, sin, inw, qw, kw, vw, qnw, knw, ow, postw, gw, uw, dw):
        return F.decoder_layer_prefill(self.kernels, x, cos, sin, (inw, qw, kw, vw, qnw, knw, ow, postw, gw, uw, dw),
                                       self.heads, self.kv_heads, self.dim, self.eps, self.act, self.block,
                                       self.paired)


class DecoderAttentionPrefillStep(_Step):
    """The attention half of an MoE decoder layer over a whole prompt (F.decoder_attention_prefill)."""

    def __init__(self, kernels, heads, kv_heads, dim, eps, block, paired=True):
        super().__init__(kernels)
        self.heads, self.kv_heads, self.dim, self.eps = heads, kv_heads, dim, eps
        self.block, self.paired = block, paired

    def construct(self, x, cos, sin, inw, qw, kw, vw, ow, postw):
        return F.decoder_attention_prefill(self.kernels, x, cos, sin, (inw, qw, kw, vw, ow, postw), self.heads,
                                           self.kv_heads, self.dim, self.eps, self.block, self.paired)


class CacheWriteStep(nn.Cell):
    """Store every layer's prompt k, v ([L, B, Hkv, S, D] stacked) at rows write_idx of the layers' [B*Hkv*T, D]
    caches, in place, in one graph (caches the graphs write, runtime/kvcache.py GraphKVCache).

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
