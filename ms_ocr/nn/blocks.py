"""Transformer blocks holding HF-named Parameters: pre-norm decoder layer (llama family), pre-LN ViT layer.

The math lives in nn/functional.py; `weights(names)` hands a layer's weights to the shared layer steps
in the order the functions take them.
"""

from mindspore import nn

from ms_ocr.nn.attention import KVCacheAttention, VisionSelfAttention
from ms_ocr.nn.layers import LayerNorm, RMSNorm
from ms_ocr.nn.mlp import MLP, GatedMLP
from ms_ocr.ops import get_activation


class WeightOrder:
    """Mixin: `weights(names)` -> this layer's weight Tensors in the order of `names` (F.*_WEIGHTS).

    They are handed over as plain Tensors (`Parameter.value()`, no copy): a graph called with different
    Parameter objects compiles a new executable per layer, each with its own activation pool.
    """

    def weights(self, names):
        out = []
        for name in names:
            obj = self
            for part in name.split("."):
                obj = getattr(obj, part)
            out.append(obj.value())
        return tuple(out)


class DecoderLayer(nn.Cell, WeightOrder):
    """input_layernorm -> self_attn -> residual -> post_attention_layernorm -> mlp -> residual."""

    def __init__(self, hidden, intermediate, num_heads, num_kv_heads, head_dim, eps, act="silu"):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = KVCacheAttention(hidden, num_heads, num_kv_heads, head_dim)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = GatedMLP(hidden, intermediate, act)
        self.spec = dict(heads=num_heads, kv_heads=num_kv_heads, dim=head_dim, eps=eps, act=get_activation(act))

    def construct(self, x, cos, sin, write_idx, mask):
        """Cached step (decode): attends over the cache after writing this step's k/v into it."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, write_idx, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class ViTLayer(nn.Cell, WeightOrder):
    """SigLIP-style layer (layer_norm1 -> self_attn -> layer_norm2 -> mlp): holds the Parameters; it runs
    through the shared steps (F.vit_attention_in / attention chunks / F.vit_out_mlp)."""

    def __init__(self, dim, intermediate, num_heads, eps, act):
        super().__init__()
        self.layer_norm1 = LayerNorm(dim, eps)
        self.self_attn = VisionSelfAttention(dim, num_heads)
        self.layer_norm2 = LayerNorm(dim, eps)
        self.mlp = MLP(dim, intermediate, act)
        self.spec = dict(heads=num_heads, dim=dim // num_heads, eps=eps, act=get_activation(act))
