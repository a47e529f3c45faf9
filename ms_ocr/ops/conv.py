"""2-D convolution kernel: MindSpore's Conv2D on Ascend (and for ONNX export), unfold + matmul elsewhere.

MindSpore 2.10's CPU Conv2D kernel is slow for k x k kernels: a 3x3 48->48 convolution on a 200x200 map took
1.7 s where unfold + one matmul took 33 ms (torch: 22 ms); depthwise 5x5 on 192x50x50 took 53 ms (torch 0.9 ms).
The composed form computes the same sums (zero padding, stride, groups) in a different order (fp32 rounding)."""

from mindspore import ops

from ms_ocr.ops import backend


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv2d(x, weight, stride=1, padding=0, groups=1):
    """NCHW x, weight [O, C / groups, kh, kw], symmetric zero `padding` (int or (ph, pw)), no bias."""
    if backend.FUSED or backend.PORTABLE:
        return ops.conv2d(x, weight, stride=stride, pad_mode="pad", padding=padding, groups=groups)
    b, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    (sh, sw), (ph, pw) = _pair(stride), _pair(padding)
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    if kh == kw == 1 and sh == sw == 1 and ph == pw == 0 and groups == 1:
        return ops.matmul(weight.reshape(o, c), x.reshape(b, c, h * w)).reshape(b, o, h, w)
    cols = ops.unfold(x, (kh, kw), 1, (ph, pw), (sh, sw))  # [B, C * kh * kw, L], rows in (c, i, j) order
    k = kh * kw
    if groups == 1:
        y = ops.matmul(weight.reshape(o, c * k), cols)
    elif groups == c and o == c:  # depthwise: per channel, its taps' weights times its taps (a batched matmul
        # over channels: 6x faster than multiply + reduce over the tap axis, measured on 192 x 5x5 x 50x50)
        y = ops.matmul(weight.reshape(1, c, 1, k), cols.reshape(b, c, k, oh * ow))
    else:
        og = o // groups
        y = ops.matmul(weight.reshape(groups, og, cg * k), cols.reshape(b, groups, cg * k, oh * ow))
    return y.reshape(b, o, oh, ow)
