"""HunyuanOCR vision tower `vit.*`: patch embedding with a resampled position table, pre-LN ViT layers
(bidirectional within an image, no rope) and the `perceive` patch merger (reference: transformers
HunYuanVLVisionTransformer, with the hub's parameter names)."""

from mindspore import nn, ops

from ms_ocr import ops as K
from ms_ocr.nn import Linear, PatchEmbed, PatchEmbeddings, RMSNorm, ViTLayer, zeros_param
from ms_ocr.nn.blocks import HUNYUAN_VIT_NAMES


def VisionEmbeddings(cfg):
    """Per-patch conv + the side x side position table (after an unused row 0) resampled to the grid; the
    host offsets the tap indices by one."""
    side = cfg.max_image_size // cfg.patch_size
    return PatchEmbeddings(cfg.num_channels, cfg.hidden_size, cfg.patch_size, side * side + 1)


class Activation(nn.Cell):
    """The parameter-free `proj.1` slot between the merger's convs (keeps the checkpoint's numbering)."""

    def __init__(self, name):
        super().__init__()
        self.act = K.get_activation(name)

    def construct(self, x):
        return self.act(self.kernels, x)


class PatchMerger(nn.Cell):
    """perceive: RMSNorm -> 2x2 conv -> GELU -> 1x1 conv -> newline column per row -> linear to the text width
    -> [image_begin, rows..., image_end] -> RMSNorm. Output H * (W + 1) + 2 tokens for an H x W merged grid."""

    def __init__(self, cfg, text_hidden):
        super().__init__()
        c, m = cfg.hidden_size, cfg.spatial_merge_size
        self.before_rms = RMSNorm(c, cfg.rms_norm_eps)
        # Stride == kernel convs over pre-gathered windows are matmuls (PatchEmbed: weight [out, in, k, k]).
        self.proj = nn.CellList([PatchEmbed(c, 2 * c, m), Activation(cfg.hidden_act), PatchEmbed(2 * c, 4 * c, 1)])
        self.mlp = Linear(4 * c, text_hidden)
        self.image_newline = zeros_param((4 * c,))
        self.image_begin = zeros_param((text_hidden,))
        self.image_end = zeros_param((text_hidden,))
        self.image_sep = zeros_param((text_hidden,))  # in the checkpoint, unused by the reference
        self.after_rms = RMSNorm(text_hidden, cfg.rms_norm_eps)

    def construct(self, x, merge_idx, row_idx):
        """x [N, C] raster patches; merge_idx [M, m*m] each window's patches in (ky, kx) order; row_idx
        [H * (W + 1)] picks merged tokens, with index M meaning the newline column."""
        x = self.before_rms(x)
        m = merge_idx.shape[0]
        win = ops.gather(x, merge_idx, 0).transpose(0, 2, 1).reshape(m, -1)  # [M, C*k*k] in (c, ky, kx) order
        y = self.proj[2](self.proj[1](self.proj[0](win)))
        y = ops.concat((y, self.image_newline[None].astype(y.dtype)), 0)
        y = self.mlp(ops.gather(y, row_idx, 0))
        y = ops.concat((self.image_begin[None].astype(y.dtype), y, self.image_end[None].astype(y.dtype)), 0)
        return self.after_rms(y)


class VisionTransformer(nn.Cell):
    def __init__(self, cfg, text_hidden):
        super().__init__()
        self.embeddings = VisionEmbeddings(cfg)
        self.layers = nn.CellList([
            ViTLayer(cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.rms_norm_eps,
                     cfg.hidden_act, rope=False, names=HUNYUAN_VIT_NAMES)
            for _ in range(cfg.num_hidden_layers)])
        self.perceive = PatchMerger(cfg, text_hidden)
