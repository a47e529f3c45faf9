"""Transformer blocks: pre-norm decoder layer (llama family) and pre-LN ViT encoder layer."""

from mindspore import nn

from ms_ocr.nn.attention import KVCacheAttention, VisionSelfAttention
from ms_ocr.nn.layers import LayerNorm, RMSNorm
from ms_ocr.nn.mlp import MLP, GatedMLP


class DecoderLayer(nn.Cell):
    """input_layernorm -> self_attn -> residual -> post_attention_layernorm -> mlp -> residual."""

    def __init__(self, hidden, intermediate, num_heads, num_kv_heads, head_dim, eps, act="silu",
                 bias=False, attention_cls=KVCacheAttention):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = attention_cls(hidden, num_heads, num_kv_heads, head_dim, bias)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = GatedMLP(hidden, intermediate, act, bias)

    def construct(self, x, cos, sin, write_idx, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, write_idx, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class ViTLayer(nn.Cell):
    """SigLIP-style layer: layer_norm1 -> self_attn -> residual -> layer_norm2 -> mlp -> residual."""

    def __init__(self, dim, intermediate, num_heads, eps, act):
        super().__init__()
        self.layer_norm1 = LayerNorm(dim, eps)
        self.self_attn = VisionSelfAttention(dim, num_heads)
        self.layer_norm2 = LayerNorm(dim, eps)
        self.mlp = MLP(dim, intermediate, act)

    def construct(self, x, cos, sin, mask):
        x = x + self.self_attn(self.layer_norm1(x), cos, sin, mask)
        return x + self.mlp(self.layer_norm2(x))
