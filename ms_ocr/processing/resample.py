"""Host-side resampling matrices that reproduce torch.nn.functional.interpolate (align_corners=False), so
graphs resample learned tables with one matmul: out = M @ table along an axis.

- bicubic with antialias (SAM / CLIP position tables in DeepSeek-OCR): PyTorch's separable AA kernel
  (a = -0.5, support widened by the scale when shrinking, weights normalised per output).
- linear without antialias (SAM relative-position tables).
"""

import numpy as np


def _aa_cubic(x, a=-0.5):
    x = np.abs(x)
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0.0))


def bicubic_aa_matrix(in_size, out_size):
    """[out, in] float32: F.interpolate(mode="bicubic", antialias=True, align_corners=False) along one axis."""
    if in_size == out_size:
        return np.eye(in_size, dtype=np.float32)
    scale = in_size / out_size
    support = 2.0 * scale if scale >= 1.0 else 2.0
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    m = np.zeros((out_size, in_size), np.float64)
    for i in range(out_size):
        center = scale * (i + 0.5)
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size)
        j = np.arange(xmin, xmax)
        w = _aa_cubic((j - center + 0.5) * invscale)
        total = w.sum()
        m[i, xmin:xmax] = w / total if total != 0 else w
    return m.astype(np.float32)


def linear_matrix(in_size, out_size):
    """[out, in] float32: F.interpolate(mode="linear", align_corners=False) along one axis."""
    if in_size == out_size:
        return np.eye(in_size, dtype=np.float32)
    scale = np.float32(in_size) / np.float32(out_size)  # float32 index arithmetic, as PyTorch's CPU kernel
    m = np.zeros((out_size, in_size), np.float32)
    for i in range(out_size):
        src = max(np.float32(scale * np.float32(i + 0.5) - np.float32(0.5)), np.float32(0.0))
        i0 = min(int(np.floor(src)), in_size - 1)
        i1 = min(i0 + 1, in_size - 1)
        lam = np.float32(src - np.float32(i0))
        m[i, i0] += 1.0 - lam
        m[i, i1] += lam
    return m


def relative_index(q_size, k_size):
    """[q, k] int32 rows of a (2*max(q, k) - 1)-row relative table for every (query, key) pair (SAM get_rel_pos)."""
    q = np.arange(q_size)[:, None] * max(k_size / q_size, 1.0)
    k = np.arange(k_size)[None, :] * max(q_size / k_size, 1.0)
    return ((q - k) + (k_size - 1) * max(q_size / k_size, 1.0)).astype(np.int64).astype(np.int32)


def _cubic_taps_int16(in_size, out_size, a=-0.75):
    """PyTorch's uint8 bicubic (antialias=False, align_corners=False) taps along one axis: (index [out, 4], int
    weights [out, 4], precision bits). Four taps around each source position with edge indices clamped (their
    weights summed on the edge pixel, as the float kernel's clamped reads), normalised, then scaled to int16 with
    the most bits that keep the largest weight below 2^15, as the CPU uint8 kernel does."""
    scale = in_size / out_size
    center = scale * (np.arange(out_size) + 0.5)
    first = np.floor(center - 1.5).astype(np.int64)
    j = first[:, None] + np.arange(4)[None]
    x = np.abs(j - center[:, None] + 0.5)
    w = np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1, np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0.0))
    w = w / w.sum(1, keepdims=True)
    idx = np.clip(j, 0, in_size - 1)
    for k in range(3, 0, -1):  # clamped taps repeat an edge index: fold their weights onto one tap
        same = idx[:, k] == idx[:, k - 1]
        w[same, k - 1] += w[same, k]
        w[same, k] = 0.0
    precision = 0
    while precision < 22 and int(0.5 + w.max() * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    v = w * (1 << precision)
    return idx, np.trunc(np.where(v < 0, v - 0.5, v + 0.5)).astype(np.int32), precision


def _uint8_pass(x, out_size, axis):
    idx, w, precision = _cubic_taps_int16(x.shape[axis], out_size)
    x = np.moveaxis(x, axis, 0).astype(np.int32)  # |sum| < 255 * 2^16: int32 is exact
    acc = sum(w[:, k].reshape((-1,) + (1,) * (x.ndim - 1)) * x[idx[:, k]] for k in range(4))
    out = np.clip((acc + (1 << (precision - 1))) >> precision, 0, 255).astype(np.uint8)
    return np.moveaxis(out, 0, axis)


def resize_bicubic_uint8(img, out_h, out_w):
    """HxWxC uint8 -> out_h x out_w x C uint8, equal to torch F.interpolate(uint8, "bicubic", antialias=False) on
    the CPU (its fixed-point kernel: horizontal pass rounded to uint8, then the vertical pass), which is what
    torchvision's resize of a uint8 tensor runs."""
    return _separable(np.asarray(img, np.uint8), out_h, out_w, _uint8_pass)


def _fma(a, b, c):
    """float32 a * b + c rounded once (a fused multiply-add; the exact product fits a float64)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(np.float32)


def _cubic_taps_float(in_size, out_size, a=-0.75):
    """PyTorch's float bicubic (antialias=False, align_corners=False) taps along one axis: (index [out, 4] clamped
    to the edges, float32 weights [out, 4]). The CPU kernel's float32 arithmetic, with the multiply-adds its build
    fuses (found by matching its weights bit for bit: the source position, and the middle step of the outer
    polynomial)."""
    f = np.float32
    a = f(a)
    scale = f(in_size) / f(out_size)
    src = _fma(scale, np.arange(out_size, dtype=f) + f(0.5), f(-0.5))
    first = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    t = np.clip(src - first.astype(f), f(0), f(1)).astype(f)

    def near(x):  # |x| <= 1
        return (_fma(a + f(2), x, -(a + f(3))) * x) * x + f(1)

    def far(x):  # 1 < |x| < 2
        return _fma(_fma(a, x, -(f(5) * a)), x, f(8) * a) * x - f(4) * a

    one_minus = f(1) - t
    w = np.stack([far(t + f(1)), near(t), near(one_minus), far(one_minus + f(1))], 1).astype(f)
    idx = np.clip(first[:, None] - 1 + np.arange(4)[None], 0, in_size - 1)
    return idx, w


def _float_pass(x, out_size, axis):
    idx, w = _cubic_taps_float(x.shape[axis], out_size)
    x = np.moveaxis(x, axis, 0)
    shape = (-1,) + (1,) * (x.ndim - 1)
    # the kernel's order, found as the weights were: the second tap's product, then the others fused in
    acc = x[idx[:, 1]] * w[:, 1].reshape(shape)
    for k in (0, 2, 3):
        acc = _fma(x[idx[:, k]], w[:, k].reshape(shape), acc)
    return np.moveaxis(acc, 0, axis)


def resize_bicubic_float(img, out_h, out_w):
    """HxWxC -> out_h x out_w x C float32 as torch F.interpolate(float, "bicubic", antialias=False) on the CPU
    computes it: four taps per output with edge reads clamped, along the width, then the height, in float32 with
    the multiply-adds the kernel's build fuses (torch 2.13's CPU wheel; equal bit for bit on the sizes tested)."""
    return _separable(np.asarray(img, np.float32), out_h, out_w, _float_pass)


def _separable(x, out_h, out_w, one_pass):
    """A separable resize: `one_pass` along the width, then the height (each only where the size changes)."""
    if x.shape[1] != out_w:
        x = one_pass(x, out_w, 1)
    if x.shape[0] != out_h:
        x = one_pass(x, out_h, 0)
    return x
