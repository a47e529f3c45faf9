"""PP-DocLayoutV3's mask branch (transformers' PPDocLayoutV3MaskFeatFPN / ScaleHead / EncoderMaskOutput and
mask_to_box_coordinate): the hybrid encoder's maps fused into a stride-4 prototype map, NCHW, inference only."""

import numpy as np
import mindspore as ms
from mindspore import nn, ops

from ms_ocr.layout.backbone import Conv2d, ConvLayer
from ms_ocr.layout.encoder import HybridEncoder


def _up2(x, axis):
    """x2 bilinear (align_corners=False) along one axis: each source value makes two, 3:1 with its neighbour
    above/below (the edges read themselves), interleaved."""
    n = x.shape[axis]
    if axis == 3:
        prev, nxt = ops.concat((x[..., :1], x[..., :n - 1]), 3), ops.concat((x[..., 1:], x[..., n - 1:]), 3)
    else:
        prev, nxt = ops.concat((x[:, :, :1], x[:, :, :n - 1]), 2), ops.concat((x[:, :, 1:], x[:, :, n - 1:]), 2)
    pair = ops.stack((0.25 * prev + 0.75 * x, 0.75 * x + 0.25 * nxt), axis + 1)  # [..., n, 2, ...]
    shape = list(x.shape)
    shape[axis] = 2 * n
    return pair.reshape(tuple(shape))


def upsample2(x):
    """F.interpolate(scale_factor=2, mode="bilinear", align_corners=False) of [B, C, H, W], separably."""
    return _up2(_up2(x, 3), 2)


class Upsample2(nn.Cell):
    """nn.Upsample(scale_factor=2, mode="bilinear"): a parameter-free slot of a scale head's layer list."""

    def construct(self, x):
        return upsample2(x)


class ScaleHead(nn.Cell):
    def __init__(self, cin, channels, stride, base_stride):
        super().__init__()
        steps = max(1, int(np.log2(stride) - np.log2(base_stride)))
        layers = []
        for k in range(steps):
            layers.append(ConvLayer(cin if k == 0 else channels, channels, 3, act="silu", padding=1))
            if stride != base_stride:
                layers.append(Upsample2())
        self.layers = nn.CellList(layers)

    def construct(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class MaskFeatFPN(nn.Cell):
    """The encoder's maps (any stride order) -> one map at the finest stride: a scale head per level brings each to
    it, summed, then an output conv."""

    def __init__(self, in_channels, strides, channels, out_channels):
        super().__init__()
        self.order = tuple(int(i) for i in np.argsort(strides, axis=0))
        strides = [strides[i] for i in self.order]
        self.scale_heads = nn.CellList([ScaleHead(in_channels[i], channels, s, strides[0])
                                        for i, s in zip(self.order, strides)])
        self.output_conv = ConvLayer(channels, out_channels, 3, act="silu", padding=1)

    def construct(self, maps):
        # the reference resizes each level's output to the finest map's size; the encoder's maps halve exactly
        # (its FPN concatenates x2-upsampled maps), so every scale head already ends at that size
        out = self.scale_heads[0](maps[self.order[0]])
        for i in range(1, len(self.order)):
            out = out + self.scale_heads[i](maps[self.order[i]])
        return self.output_conv(out)


class EncoderMaskOutput(nn.Cell):
    def __init__(self, channels, prototypes):
        super().__init__()
        self.base_conv = ConvLayer(channels, channels, 3, act="silu", padding=1)
        self.conv = Conv2d(channels, prototypes, 1)

    def construct(self, x):
        return self.conv(self.base_conv(x))


class MaskHybridEncoder(HybridEncoder):
    """The shared hybrid encoder plus V3's mask branch: (projected maps, pos, the backbone's stride-4 map) ->
    (the fused maps, mask prototypes [B, num_prototypes, H/4, W/4])."""

    def __init__(self, cfg):
        super().__init__(cfg)
        dim, (channels, out) = cfg.encoder_hidden_dim, cfg.mask_feature_channels
        self.mask_feature_head = MaskFeatFPN([dim] * len(cfg.feat_strides), list(cfg.feat_strides), channels, out)
        self.encoder_mask_lateral = ConvLayer(cfg.x4_feat_dim, out, 3, act="silu", padding=1, residual="after")
        self.encoder_mask_output = EncoderMaskOutput(out, cfg.num_prototypes)

    def construct(self, feats, pos, x4):
        maps = self.fuse(feats, pos)
        mask = self.encoder_mask_lateral(x4, upsample2(self.mask_feature_head(maps)))  # up + lateral(x4)
        return maps, self.encoder_mask_output(mask)


def mask_to_box(mask):
    """Boolean masks [B, Q, H, W] -> their bounding boxes [B, Q, 4] as (cx, cy, w, h) in [0, 1] (pixel extents:
    the last row/column counts whole); an empty mask gives zeros. The extents come from the rows and columns that
    hold any pixel, the same maxima and minima as the reference's over all pixels."""
    h, w = mask.shape[2], mask.shape[3]
    m = mask.astype(ms.float32)
    cols, rows = ops.amax(m, 2), ops.amax(m, 3)  # [B, Q, W], [B, Q, H]
    xs, ys = ops.arange(w, dtype=ms.float32), ops.arange(h, dtype=ms.float32)
    big = ops.full_like(cols, 3.0e38)
    x_min = ops.amin(ops.select(cols > 0, ops.broadcast_to(xs, cols.shape), big), -1)
    x_max = ops.amax(xs * cols, -1) + 1
    big = ops.full_like(rows, 3.0e38)
    y_min = ops.amin(ops.select(rows > 0, ops.broadcast_to(ys, rows.shape), big), -1)
    y_max = ops.amax(ys * rows, -1) + 1
    full = ops.amax(cols, -1)  # 1 where the mask has a pixel
    x0, x1 = x_min * full / w, x_max * full / w
    y0, y1 = y_min * full / h, y_max * full / h
    return ops.stack(((x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0), -1)
