"""DeepSeek-OCR-2 vision: SAM ViT-B (896 output channels) feeding a Qwen2-shaped encoder that appends learnable
queries (144 for a 768-px tile, 256 for the 1024-px global view), attends bidirectionally over the image
tokens and causally over the queries, and returns the query states; a linear projector maps them to the
text width (reference: transformers DeepseekOcr2VisionModel + multi_modal_projector)."""

import numpy as np
from mindspore import nn, ops

from ms_ocr import ops as K
from ms_ocr.nn import Embedding, Linear, MultiAxisRotary, RMSNorm
from ms_ocr.nn import functional as F
from ms_ocr.nn.mlp import GatedMLP
from ms_ocr.nn.blocks import WeightOrder
from ms_ocr.nn.deepencoder import Projector
from ms_ocr.nn.layers import zeros_param
from ms_ocr.nn.sam import SamEncoder


ENCODER_LAYER_WEIGHTS = ("input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
                         "self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight",
                         "self_attn.v_proj.bias", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                         "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")


def encoder_layer(kn, x, cos, sin, mask, weights, heads, kv_heads, eps, act):
    """One Qwen2 encoder layer as a function of its weights (ENCODER_LAYER_WEIGHTS order)."""
    inw, qw, qb, kw, kb, vw, vb, ow, postw, gw, uw, dw = weights
    b, s, c = x.shape
    d = c // heads
    h = K.rms_norm(kn, x, inw, eps)
    q = F.linear(kn, h, qw, qb).reshape(b, s, heads, d).transpose(0, 2, 1, 3)
    k = F.linear(kn, h, kw, kb).reshape(b, s, kv_heads, d).transpose(0, 2, 1, 3)
    v = F.linear(kn, h, vw, vb).reshape(b, s, kv_heads, d).transpose(0, 2, 1, 3)
    q, k = K.apply_rope(kn, q, cos, sin), K.apply_rope(kn, k, cos, sin)
    x = x + F.linear(kn, F.merge_heads(K.attention(kn, q, k, v, mask, d ** -0.5)), ow)
    return x + F.gated_mlp(kn, K.rms_norm(kn, x, postw, eps), gw, uw, dw, act)


class EncoderAttention(nn.Cell):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, hidden // heads
        self.q_proj = Linear(hidden, heads * self.dim)
        self.k_proj = Linear(hidden, kv_heads * self.dim)
        self.v_proj = Linear(hidden, kv_heads * self.dim)
        self.o_proj = Linear(heads * self.dim, hidden, bias=False)

    def construct(self, h, cos, sin, mask):
        b, s, _ = h.shape
        q = self.q_proj(h).reshape(b, s, self.heads, self.dim).transpose(0, 2, 1, 3)
        k = self.k_proj(h).reshape(b, s, self.kv_heads, self.dim).transpose(0, 2, 1, 3)
        v = self.v_proj(h).reshape(b, s, self.kv_heads, self.dim).transpose(0, 2, 1, 3)
        kn = self.kernels
        q, k = K.apply_rope(kn, q, cos, sin), K.apply_rope(kn, k, cos, sin)
        return self.o_proj(F.merge_heads(K.attention(kn, q, k, v, mask, self.dim ** -0.5)))


class EncoderLayer(nn.Cell, WeightOrder):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = EncoderAttention(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act)

    def construct(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class _Stack(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.CellList([EncoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class _Holder(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.model = _Stack(cfg)


class QueryEncoder(nn.Cell):
    """`qwen2_model.*`: the Qwen2 decoder stack (model.model.layers / norm) and the two query tables.

    construct runs all layers in one graph (small inputs, tests); the runtime uses prepare / layer weights /
    finish with one shared layer graph (EncoderLayerStep) to bound activation memory to one layer."""

    def __init__(self, cfg):
        super().__init__()
        self.model = _Holder(cfg)
        self.query_768 = Embedding(144, cfg.hidden_size)
        self.query_1024 = Embedding(256, cfg.hidden_size)
        self.rotary = MultiAxisRotary(cfg.hidden_size // cfg.num_attention_heads, cfg.rope_theta)

    def prepare(self, feats, pos, visible):
        n, p, c = feats.shape
        queries = self.query_768.weight if p <= 144 else self.query_1024.weight
        x = ops.concat((feats, ops.broadcast_to(queries[None], (n,) + queries.shape).astype(feats.dtype)), 1)
        cos, sin = self.rotary(pos)
        return x, cos, sin, K.attention_mask(self.kernels, visible[None, None])

    def finish(self, x, num_patches):
        return self.model.model.norm(x)[:, num_patches:]

    def construct(self, feats, pos, visible):
        """feats [n, P, C] SAM tokens -> query states [n, Q, C]; pos [1, 1, P+Q]; visible [P+Q, P+Q] bool."""
        x, cos, sin, mask = self.prepare(feats, pos, visible)
        for layer in self.model.model.layers:
            x = layer(x, cos, sin, mask)
        return self.finish(x, feats.shape[1])


def hybrid_visible(num_patches, num_queries):
    """Bidirectional among the image tokens, causal for the queries (which see every image token)."""
    t = num_patches + num_queries
    visible = np.tril(np.ones((t, t), bool))
    visible[:num_patches, :num_patches] = True
    return visible


class EncoderLayerStep(nn.Cell):
    def __init__(self, kernels, heads, kv_heads, eps, act):
        super().__init__()
        self.kernels, self.heads, self.kv_heads, self.eps, self.act = kernels, heads, kv_heads, eps, act

    def construct(self, x, cos, sin, mask, inw, qw, qb, kw, kb, vw, vb, ow, postw, gw, uw, dw):
        return encoder_layer(self.kernels, x, cos, sin, mask, (inw, qw, qb, kw, kb, vw, vb, ow, postw, gw, uw, dw),
                             self.heads, self.kv_heads, self.eps, self.act)


class DeepseekOCR2Vision(nn.Cell):
    """Local names `vision.{sam_model, qwen2_model, projector, view_seperator}` (hub: `model.*`)."""

    def __init__(self, sam_cfg, enc_cfg, text_hidden):
        super().__init__()
        self.sam_model = SamEncoder(**sam_cfg)
        self.qwen2_model = QueryEncoder(enc_cfg)
        self.encoder_cfg = enc_cfg
        self.projector = Projector(enc_cfg.hidden_size, text_hidden)
        self.view_seperator = zeros_param((text_hidden,))

    def extra_rows(self):
        """Rows an image's assembly may use besides its view tokens: [view_seperator]."""
        return self.view_seperator[None]

    def post(self, x, pos, visible):
        """SAM output [n, g, g, C] -> projected query features [n * Q, text_hidden]."""
        n, g, _, c = x.shape
        q = self.qwen2_model(x.reshape(n, g * g, c), pos, visible)
        y = self.projector.layers(q)
        return y.reshape(-1, y.shape[-1])

    def construct(self, pixels, pos_m, win_resize, win_index, glob_resize, glob_index, pos, visible):
        """One view size in one graph: pixels [n, 3, S, S] -> [n * Q, text_hidden]."""
        return self.post(self.sam_model(pixels, pos_m, win_resize, win_index, glob_resize, glob_index), pos, visible)
