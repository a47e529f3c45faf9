"""2-D convolution kernel: MindSpore's Conv2D on Ascend (and for ONNX export), unfold + matmul elsewhere.

MindSpore 2.10's CPU Conv2D kernel is slow for k x k kernels: many times slower than unfold + one matmul (and
than torch), depthwise ones included (docs/journal/architecture.md, "MindSpore CPU pitfalls").
The composed form computes the same sums (zero padding, stride, groups) in a different order (fp32 rounding)."""

import numpy as np
from mindspore import Tensor, ops

from ms_ocr.ops.kernels import ChosenAtBind
from ms_ocr.ops.activation import get_activation


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv2d(kn, x, weight, stride=1, padding=0, groups=1, dilation=1):
    """NCHW x, weight [O, C / groups, kh, kw], symmetric zero `padding` (int or (ph, pw)), `dilation`, no bias."""
    if kn.fused or kn.portable:
        return ops.conv2d(x, weight, stride=stride, pad_mode="pad", padding=padding, dilation=dilation, groups=groups)
    b, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if kh == kw == 1 and sh == sw == 1 and ph == pw == 0 and groups == 1:
        return ops.matmul(weight.reshape(o, c), x.reshape(b, c, h * w)).reshape(b, o, h, w)
    cols = ops.unfold(x, (kh, kw), (dh, dw), (ph, pw), (sh, sw))  # [B, C * kh * kw, L], rows in (c, i, j) order
    k = kh * kw
    if groups == 1:
        y = ops.matmul(weight.reshape(o, c * k), cols)
    elif groups == c and o == c:  # depthwise: per channel, its taps' weights times its taps (a batched matmul
        # over channels: faster than multiply + reduce over the tap axis)
        y = ops.matmul(weight.reshape(1, c, 1, k), cols.reshape(b, c, k, oh * ow))
    else:
        og = o // groups
        y = ops.matmul(weight.reshape(groups, og, cg * k), cols.reshape(b, groups, cg * k, oh * ow))
    return y.reshape(b, o, oh, ow)


# Conv2dAffine's codes (native/conv.cc): the activation, and where a residual is added
ACTIVATIONS = (None, "relu", "silu")
RESIDUALS = (None, "after", "before")


def conv_affine_native(kn, stride=1, padding=0, dilation=1, groups=1, act=None, residual=None):
    """(op, geometry) of the native Conv2dAffine for a convolution's settings where it is routed
    (kn.conv), else (None, None): decided once, when kernels are bound to the Cell (ConvAffine)."""
    if kn.conv is None or kn.fused or kn.portable or act not in ACTIVATIONS:
        return None, None
    geometry = Tensor(np.array([stride, padding, dilation, groups, ACTIVATIONS.index(act), RESIDUALS.index(residual)],
                               np.int32))
    return kn.conv(stride, padding, dilation), geometry


def conv2d_affine(kn, native, geometry, x, weight, scale, shift, stride=1, padding=0, groups=1, dilation=1, act=None,
                  res=None, residual=None):
    """act(conv(x, weight) * scale + shift [+ res]) [+ res]: a convolution (no bias) with a per-channel affine (a
    frozen batch norm's, or scale 1 and a bias), an activation (a get_activation name; natively None, "relu" or
    "silu") and an optional residual added
    "before" or "after" the activation. `native`, `geometry`: conv_affine_native's for these settings (one kernel,
    no unfolded map), or None for the composed ops."""
    if native is not None:
        return native(x, weight, scale, shift, geometry) if res is None else native(x, weight, scale, shift, geometry,
                                                                                     res)
    y = conv2d(kn, x, weight, stride, padding, groups, dilation)
    y = y * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)
    if residual == "before":
        y = y + res
    if act is not None:
        y = get_activation(act)(kn, y)
    return y + res if residual == "after" else y


def deformable_native(kn):
    """The native DeformableSample (multi-scale deformable attention's sampling) where routed, else None."""
    if kn.fused or kn.portable:
        return None
    return kn.deformable


class ConvAffine(ChosenAtBind):
    """A Cell computing conv2d_affine with fixed settings (`conv_settings`: stride, padding, dilation, groups, act,
    residual): its native op and geometry (`native`, `geometry`: conv_affine_native's) are picked when kernels are
    bound to it (ops.kernels.bind); None until then, the composed ops."""

    native = geometry = None
    conv_settings = ()

    def choose(self, kernels):
        self.native, self.geometry = conv_affine_native(kernels, *self.conv_settings)
