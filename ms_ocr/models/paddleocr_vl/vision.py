"""PaddleOCR-VL NaViT SigLIP vision encoder and mlp_AR projector (reference: transformers modeling_paddleocr_vl)."""

from mindspore import nn, ops

from ms_ocr import ops as K
from ms_ocr.nn import LayerNorm, Linear, PatchEmbeddings, ViTLayer, VisionRotary2D


def VisionEmbeddings(cfg):
    """Per-patch conv + the square 27x27 position table resampled to the grid."""
    return PatchEmbeddings(cfg.num_channels, cfg.hidden_size, cfg.patch_size, (cfg.image_size // cfg.patch_size) ** 2)


class VisionEncoder(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.CellList([
            ViTLayer(cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.layer_norm_eps,
                     cfg.hidden_act)
            for _ in range(cfg.num_hidden_layers)])
        self.rotary = VisionRotary2D(cfg.hidden_size // cfg.num_attention_heads, cfg.rope_theta)


class VisionTransformer(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = VisionEmbeddings(cfg)
        self.encoder = VisionEncoder(cfg)
        self.post_layernorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps)


class VisionModel(nn.Cell):
    """Holds `vision_model` so parameter names match the hub's `visual.vision_model.*`."""

    def __init__(self, cfg):
        super().__init__()
        self.vision_model = VisionTransformer(cfg)


class Projector(nn.Cell):
    """mlp_AR: LayerNorm per patch, 2x2 patch merge, Linear -> exact GELU -> Linear to the text width."""

    def __init__(self, vision_hidden, text_hidden, merge):
        super().__init__()
        merged = vision_hidden * merge * merge
        self.pre_norm = LayerNorm(vision_hidden, 1e-5)
        self.linear_1 = Linear(merged, merged)
        self.linear_2 = Linear(merged, text_hidden)

    def construct(self, feats, merge_idx):
        x = self.pre_norm(feats)
        m = merge_idx.shape[0]
        # [M, 4] patch indices in (row, col) block order -> [M, 4, C] -> [M, 4C]
        x = ops.gather(x, merge_idx, 0).reshape(m, -1)
        return self.linear_2(K.gelu_erf(self.kernels, self.linear_1(x)))
