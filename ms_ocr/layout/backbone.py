"""HGNetV2 backbone of the PP-DocLayout models (transformers' models/hgnet_v2/modeling_hgnet_v2.py), NCHW, inference
only.

Parameter names follow the reference (`embedder.stem1.convolution.weight`, `.normalization.running_mean`, ...).
Batch norms are frozen: applied as a per-channel affine from the running statistics (eps 1e-5), as the
reference's eval mode / FrozenBatchNorm2d compute.
"""

from dataclasses import dataclass, field

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

from ms_ocr import ops as K

BN_EPS = 1e-5


@dataclass
class HGNetV2Config:
    """HGNetV2Config fields the backbone reads; defaults are the reference class's (the L variant)."""
    num_channels: int = 3
    embedding_size: int = 64
    hidden_sizes: list = field(default_factory=lambda: [256, 512, 1024, 2048])
    hidden_act: str = "relu"
    stem_channels: list = field(default_factory=lambda: [3, 32, 48])
    stem_strides: list = field(default_factory=lambda: [2, 1, 1, 2, 1])
    stage_in_channels: list = field(default_factory=lambda: [48, 128, 512, 1024])
    stage_mid_channels: list = field(default_factory=lambda: [48, 96, 192, 384])
    stage_out_channels: list = field(default_factory=lambda: [128, 512, 1024, 2048])
    stage_num_blocks: list = field(default_factory=lambda: [1, 1, 3, 1])
    stage_downsample: list = field(default_factory=lambda: [False, True, True, True])
    stage_downsample_strides: list = field(default_factory=lambda: [2, 2, 2, 2])
    stage_light_block: list = field(default_factory=lambda: [False, False, True, True])
    stage_kernel_size: list = field(default_factory=lambda: [3, 3, 5, 5])
    stage_numb_of_layers: list = field(default_factory=lambda: [6, 6, 6, 6])
    use_learnable_affine_block: bool = False
    out_features: list = field(default_factory=lambda: ["stage4"])  # HGNetV2Config's; the layout configs set theirs

    @classmethod
    def from_dict(cls, raw, unprojected=0):
        """`raw`: the checkpoint's backbone_config. `unprojected`: how many of the returned stages, first first, do
        not go through the layout model's input projections (PP-DocLayoutV3's stride-4 map feeds its mask head)."""
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        cfg = cls(**known)
        if cfg.hidden_act != "relu":
            raise ValueError(f"HGNetV2 hidden_act {cfg.hidden_act!r} is not supported (relu only)")
        # the reference sizes the input projections from hidden_sizes but builds the stages from
        # stage_out_channels: for the projected stages they must agree (the L variant differs only at stage1)
        for i in cfg.out_indices[unprojected:]:
            if i and cfg.hidden_sizes[i - 1] != cfg.stage_out_channels[i - 1]:
                raise ValueError(f"HGNetV2 config: hidden_sizes[{i - 1}] must equal stage_out_channels[{i - 1}] "
                                 f"for the returned stage{i}")
        return cfg

    @property
    def out_indices(self):
        names = ["stem"] + [f"stage{i + 1}" for i in range(len(self.stage_in_channels))]
        return [names.index(n) for n in self.out_features]


class _Weight(nn.Cell):
    def __init__(self, shape):
        super().__init__()
        self.weight = Parameter(ops.zeros(shape, ms.float32), name="weight")


class Conv2d(nn.Cell, K.ConvAffine):
    """A convolution with a bias, as torch's nn.Conv2d (`weight` [O, C, k, k], `bias` [O]), then `act` (None, "relu",
    "silu")."""

    def __init__(self, cin, cout, kernel, padding=0, dilation=1, act=None):
        super().__init__()
        self.weight = Parameter(ops.zeros((cout, cin, kernel, kernel), ms.float32), name="weight")
        self.bias = Parameter(ops.zeros((cout,), ms.float32), name="bias")
        self.pad, self.dilation, self.act = padding, dilation, act
        self.ones = Tensor(np.ones(cout, np.float32))
        self.conv_settings = (1, padding, dilation, 1, act)

    def construct(self, x):
        return K.conv2d_affine(self.kernels, self.native, self.geometry, x, self.weight, self.ones, self.bias, 1,
                               self.pad, 1, self.dilation, self.act)


class FrozenBatchNorm(nn.Cell):
    """Inference batch norm from running statistics: (x - mean) / sqrt(var + eps) * weight + bias, per channel."""

    def __init__(self, channels, eps=BN_EPS):
        super().__init__()
        self.eps = eps
        self.weight = Parameter(ops.ones((channels,), ms.float32), name="weight")
        self.bias = Parameter(ops.zeros((channels,), ms.float32), name="bias")
        self.running_mean = Parameter(ops.zeros((channels,), ms.float32), name="running_mean", requires_grad=False)
        self.running_var = Parameter(ops.ones((channels,), ms.float32), name="running_var", requires_grad=False)
        self.folded = False

    def affine(self):
        """(scale, shift) [C]: the norm as x * scale + shift; constants once `fold_batch_norms` has run."""
        if self.folded:
            return self.scale, self.shift
        scale = self.weight / ops.sqrt(self.running_var + self.eps)
        return scale, self.bias - self.running_mean * scale

    def fold(self):
        """Compute (scale, shift) once, in float32 as affine() does, from the loaded statistics."""
        w, b = self.weight.asnumpy(), self.bias.asnumpy()
        mean, var = self.running_mean.asnumpy(), self.running_var.asnumpy()
        scale = (w / np.sqrt(var + np.float32(self.eps))).astype(np.float32)
        self.scale, self.shift = Tensor(scale), Tensor((b - mean * scale).astype(np.float32))
        self.folded = True

    def construct(self, x):
        scale, shift = self.affine()
        return x * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)


def fold_batch_norms(net):
    """Every FrozenBatchNorm of `net` turned into constants (after its weights are loaded): a graph then holds two
    vectors per norm instead of the five ops that derive them (measured: a third of the layout models' compile)."""
    for _, cell in net.cells_and_names():
        if isinstance(cell, FrozenBatchNorm):
            cell.fold()


class ConvLayer(nn.Cell, K.ConvAffine):
    """convolution (no bias, padding (k-1)//2 unless given) -> frozen BN -> ReLU (act=True), none (False) or the
    named activation (PP-DocLayoutV3's mask head: "silu", padding k//2); `residual` ("after" / "before" the
    activation) adds construct's `res`. One native kernel where routed (ops/conv.py conv2d_affine)."""

    def __init__(self, cin, cout, kernel, stride=1, groups=1, act=True, padding=None, residual=None):
        super().__init__()
        self.convolution = _Weight((cout, cin // groups, kernel, kernel))
        self.normalization = FrozenBatchNorm(cout)
        self.stride, self.groups, self.residual = stride, groups, residual
        self.pad = (kernel - 1) // 2 if padding is None else padding
        self.act = act if isinstance(act, str) else ("relu" if act else None)
        self.conv_settings = (stride, self.pad, 1, groups, self.act, residual)

    def construct(self, x, res=None):
        scale, shift = self.normalization.affine()
        return K.conv2d_affine(self.kernels, self.native, self.geometry, x, self.convolution.weight, scale, shift,
                               self.stride, self.pad, self.groups, 1, self.act, res, self.residual)


class ConvLayerLight(nn.Cell):
    """1x1 conv without activation, then a depthwise k x k conv with ReLU."""

    def __init__(self, cin, cout, kernel):
        super().__init__()
        self.conv1 = ConvLayer(cin, cout, 1, act=False)
        self.conv2 = ConvLayer(cout, cout, kernel, groups=cout)

    def construct(self, x):
        return self.conv2(self.conv1(x))


def _pad_right_bottom(x):
    """x [B, C, H, W] with a zero column on the right and a zero row at the bottom: two concats (MindSpore 2.10's CPU
    Pad took ~7x as long on the stem's maps)."""
    b, c, h, w = x.shape
    x = ops.concat((x, ops.zeros((b, c, h, 1), x.dtype)), 3)
    return ops.concat((x, ops.zeros((b, c, 1, w + 1), x.dtype)), 2)


def _pad_max_pool(kn, x):
    """MaxPool2d(2, stride 1, ceil_mode) over x padded by _pad_right_bottom: the native PadMaxPool2 where routed,
    else the max of the padded map's four shifted views."""
    if kn.pad_max_pool is not None:
        return kn.pad_max_pool(x)
    x = _pad_right_bottom(x)
    h, w = x.shape[2] - 1, x.shape[3] - 1
    # one axis per slice: MindSpore's CPU StridedSlice over two axes at once is ~15x slower
    top, bottom = x[:, :, :h], x[:, :, 1:]
    return ops.maximum(ops.maximum(top[..., :w], bottom[..., :w]), ops.maximum(top[..., 1:], bottom[..., 1:]))


class Embeddings(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        c0, c1, c2 = cfg.stem_channels
        s = cfg.stem_strides
        self.stem1 = ConvLayer(c0, c1, 3, s[0])
        self.stem2a = ConvLayer(c1, c1 // 2, 2, s[1])
        self.stem2b = ConvLayer(c1 // 2, c1, 2, s[2])
        self.stem3 = ConvLayer(c1 * 2, c1, 3, s[3])
        self.stem4 = ConvLayer(c1, c2, 1, s[4])

    def construct(self, pixel_values):
        x = self.stem1(pixel_values)
        b = self.stem2b(_pad_right_bottom(self.stem2a(_pad_right_bottom(x))))
        pooled = _pad_max_pool(self.kernels, x)  # over the same padded map stem2a read
        return self.stem4(self.stem3(ops.concat((pooled, b), 1)))


class BasicLayer(nn.Cell):
    def __init__(self, cin, mid, cout, layers, kernel, residual, light):
        super().__init__()
        self.residual = residual
        self.layers = nn.CellList([
            (ConvLayerLight if light else ConvLayer)(cin if i == 0 else mid, mid, kernel) for i in range(layers)])
        self.aggregation = nn.CellList([ConvLayer(cin + layers * mid, cout // 2, 1),
                                        ConvLayer(cout // 2, cout, 1, residual="after" if residual else None)])

    def construct(self, x):
        outs = [x]
        h = x
        for layer in self.layers:
            h = layer(h)
            outs.append(h)
        h = self.aggregation[0](ops.concat(outs, 1))
        return self.aggregation[1](h, x) if self.residual else self.aggregation[1](h)


class Stage(nn.Cell):
    def __init__(self, cfg, i):
        super().__init__()
        cin, mid, cout = cfg.stage_in_channels[i], cfg.stage_mid_channels[i], cfg.stage_out_channels[i]
        self.has_downsample = bool(cfg.stage_downsample[i])
        if self.has_downsample:
            self.downsample = ConvLayer(cin, cin, 3, cfg.stage_downsample_strides[i], groups=cin, act=False)
        self.blocks = nn.CellList([
            BasicLayer(cin if j == 0 else cout, mid, cout, cfg.stage_numb_of_layers[i], cfg.stage_kernel_size[i],
                       j != 0, cfg.stage_light_block[i]) for j in range(cfg.stage_num_blocks[i])])

    def construct(self, x):
        if self.has_downsample:
            x = self.downsample(x)
        for block in self.blocks:
            x = block(x)
        return x


class _Stages(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.stages = nn.CellList([Stage(cfg, i) for i in range(len(cfg.stage_in_channels))])


class HGNetV2Backbone(nn.Cell):
    """pixel_values [B, 3, H, W] -> the feature maps of cfg.out_features (default strides 8, 16, 32)."""

    def __init__(self, cfg):
        super().__init__()
        if cfg.use_learnable_affine_block:
            raise ValueError("HGNetV2 with learnable affine blocks is not supported (the PP-DocLayout models do not "
                             "use them)")
        self.embedder = Embeddings(cfg)
        self.encoder = _Stages(cfg)
        self.out_indices = tuple(cfg.out_indices)

    def construct(self, pixel_values):
        x = self.embedder(pixel_values)
        states = [x]
        for stage in self.encoder.stages:
            x = stage(x)
            states.append(x)
        return tuple(states[i] for i in self.out_indices)
