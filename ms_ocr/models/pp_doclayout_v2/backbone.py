"""HGNetV2 backbone of PP-DocLayoutV2 (transformers' models/hgnet_v2/modeling_hgnet_v2.py), NCHW, inference only.

Parameter names follow the reference (`embedder.stem1.convolution.weight`, `.normalization.running_mean`, ...).
Batch norms are frozen: applied as a per-channel affine from the running statistics (eps 1e-5), as the
reference's eval mode / FrozenBatchNorm2d compute.
"""

from dataclasses import dataclass, field

import mindspore as ms
from mindspore import Parameter, nn, ops

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
    out_features: list = field(default_factory=lambda: ["stage2", "stage3", "stage4"])

    @classmethod
    def from_dict(cls, raw):
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        cfg = cls(**known)
        if cfg.hidden_act != "relu":
            raise ValueError(f"HGNetV2 hidden_act {cfg.hidden_act!r} is not supported (relu only)")
        # the reference sizes the modules after the backbone from hidden_sizes but builds the stages from
        # stage_out_channels: for the returned stages they must agree (the L variant differs only at stage1)
        for i in cfg.out_indices:
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


class FrozenBatchNorm(nn.Cell):
    """Inference batch norm from running statistics: (x - mean) / sqrt(var + eps) * weight + bias, per channel."""

    def __init__(self, channels, eps=BN_EPS):
        super().__init__()
        self.eps = eps
        self.weight = Parameter(ops.ones((channels,), ms.float32), name="weight")
        self.bias = Parameter(ops.zeros((channels,), ms.float32), name="bias")
        self.running_mean = Parameter(ops.zeros((channels,), ms.float32), name="running_mean", requires_grad=False)
        self.running_var = Parameter(ops.ones((channels,), ms.float32), name="running_var", requires_grad=False)

    def construct(self, x):
        scale = self.weight / ops.sqrt(self.running_var + self.eps)
        shift = self.bias - self.running_mean * scale
        return x * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)


class ConvLayer(nn.Cell):
    """convolution (no bias, padding (k-1)//2) -> frozen BN -> ReLU (or none)."""

    def __init__(self, cin, cout, kernel, stride=1, groups=1, act=True):
        super().__init__()
        self.convolution = _Weight((cout, cin // groups, kernel, kernel))
        self.normalization = FrozenBatchNorm(cout)
        self.stride, self.groups, self.pad, self.act = stride, groups, (kernel - 1) // 2, act

    def construct(self, x):
        y = K.conv2d(x, self.convolution.weight, self.stride, self.pad, self.groups)
        y = self.normalization(y)
        return ops.relu(y) if self.act else y


class ConvLayerLight(nn.Cell):
    """1x1 conv without activation, then a depthwise k x k conv with ReLU."""

    def __init__(self, cin, cout, kernel):
        super().__init__()
        self.conv1 = ConvLayer(cin, cout, 1, act=False)
        self.conv2 = ConvLayer(cout, cout, kernel, groups=cout)

    def construct(self, x):
        return self.conv2(self.conv1(x))


def _pad_right_bottom(x):
    return ops.pad(x, (0, 1, 0, 1))


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
        x = _pad_right_bottom(self.stem1(pixel_values))
        b = self.stem2b(_pad_right_bottom(self.stem2a(x)))
        # MaxPool2d(2, stride 1, ceil_mode) over the padded map: the max of its four shifted views
        h, w = x.shape[2] - 1, x.shape[3] - 1
        # one axis per slice: MindSpore's CPU StridedSlice over two axes at once is ~15x slower
        top, bottom = x[:, :, :h], x[:, :, 1:]
        pooled = ops.maximum(ops.maximum(top[..., :w], bottom[..., :w]), ops.maximum(top[..., 1:], bottom[..., 1:]))
        return self.stem4(self.stem3(ops.concat((pooled, b), 1)))


class BasicLayer(nn.Cell):
    def __init__(self, cin, mid, cout, layers, kernel, residual, light):
        super().__init__()
        self.residual = residual
        self.layers = nn.CellList([
            (ConvLayerLight if light else ConvLayer)(cin if i == 0 else mid, mid, kernel) for i in range(layers)])
        self.aggregation = nn.CellList([ConvLayer(cin + layers * mid, cout // 2, 1), ConvLayer(cout // 2, cout, 1)])

    def construct(self, x):
        outs = [x]
        h = x
        for layer in self.layers:
            h = layer(h)
            outs.append(h)
        h = self.aggregation[1](self.aggregation[0](ops.concat(outs, 1)))
        return h + x if self.residual else h


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
            raise ValueError("HGNetV2 with learnable affine blocks is not supported (PP-DocLayoutV2 does not use them)")
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
