"""The composed convolution (unfold + matmul) against torch's conv2d, the reference semantics, for every form the
models use: k x k with padding, strided, depthwise, grouped, 1x1, unpadded 2x2, odd sizes; and the Conv2D branch
(Ascend, ONNX export) called with the same arguments gives the same result."""

import numpy as np
import pytest
import mindspore as ms

from ms_ocr.ops.kernels import COMPOSED
from ms_ocr.ops.conv import conv2d

CASES = {  # (C, O, k, stride, padding, groups, H, W)
    "3x3": (6, 10, 3, 1, 1, 1, 17, 23),
    "3x3 s2": (6, 8, 3, 2, 1, 1, 17, 22),
    "depthwise 3x3 s2": (8, 8, 3, 2, 1, 8, 15, 20),
    "depthwise 5x5": (8, 8, 5, 1, 2, 8, 13, 11),
    "grouped": (8, 12, 3, 1, 1, 4, 9, 10),
    "1x1": (6, 5, 1, 1, 0, 1, 7, 9),
    "1x1 s2": (6, 5, 1, 2, 0, 1, 7, 9),
    "2x2 valid": (4, 6, 2, 1, 0, 1, 9, 8),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("fused", [False, True])
def test_conv2d_matches_torch(case, fused):
    import torch
    c, o, k, s, p, g, h, w = CASES[case]
    rng = np.random.default_rng(len(case))
    x = rng.standard_normal((2, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c // g, k, k)).astype(np.float32)
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(wt), stride=s, padding=p, groups=g).numpy()
    kn = COMPOSED.for_onnx() if fused else COMPOSED  # the portable form takes the Conv2D branch, runnable on CPU
    got = conv2d(kn, ms.Tensor(x), ms.Tensor(wt), s, p, g).asnumpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


AFFINE_CASES = {  # (C, O, k, stride, padding, dilation, groups, H, W, act, residual)
    "3x3 relu": (6, 10, 3, 1, 1, 1, 1, 17, 23, "relu", None),
    "3x3 s2 silu, residual after": (6, 8, 3, 2, 1, 1, 1, 17, 22, "silu", "after"),
    "depthwise 3x3 s2": (8, 8, 3, 2, 1, 1, 8, 15, 20, None, None),
    "depthwise 5x5 relu": (8, 8, 5, 1, 2, 1, 8, 13, 11, "relu", None),
    "1x1 silu, residual before": (6, 5, 1, 1, 0, 1, 1, 7, 9, "silu", "before"),
    "3x3 dilation 4": (9, 7, 3, 1, 4, 4, 1, 20, 21, "relu", None),
    "3x3 dilation 2, residual after": (9, 7, 3, 1, 2, 2, 1, 20, 21, None, "after"),
    "2x2 valid": (16, 8, 2, 1, 0, 1, 1, 9, 8, "relu", None),
    "3x3 stem s2": (3, 32, 3, 2, 1, 1, 1, 51, 50, "relu", None),
    "3x3 several tiles": (64, 96, 3, 1, 1, 1, 1, 60, 70, "relu", "after"),
}


@pytest.mark.parametrize("case", sorted(AFFINE_CASES))
def test_conv2d_affine_native_matches_torch(case, pynative_cpu):
    """Conv2dAffine (conv.cc: columns a tile at a time into oneDNN's fp32 gemm, depthwise as a direct loop, the
    affine / activation / residual epilogue on the tile) and the composed form against torch."""
    import torch
    from ms_ocr.ops import native
    from ms_ocr.ops.conv import conv2d_affine, conv_affine_native
    kn = pynative_cpu
    if kn.conv is None:
        pytest.fail("Conv2dAffine is not routed on this machine (native library, oneDNN's sgemm, CONV_ROUTES)")
    c, o, k, s, p, d, g, h, w, act, residual = AFFINE_CASES[case]
    rng = np.random.default_rng(len(case))
    x = rng.standard_normal((2, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c // g, k, k)).astype(np.float32)
    scale, shift = rng.uniform(0.5, 1.5, o).astype(np.float32), rng.standard_normal(o).astype(np.float32)
    y = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(wt), stride=s, padding=p, dilation=d, groups=g)
    y = y * torch.tensor(scale)[:, None, None] + torch.tensor(shift)[:, None, None]
    res = rng.standard_normal(tuple(y.shape)).astype(np.float32) if residual else None
    y = y + torch.tensor(res) if residual == "before" else y
    y = torch.relu(y) if act == "relu" else torch.nn.functional.silu(y) if act == "silu" else y
    want = (y + torch.tensor(res) if residual == "after" else y).numpy()
    op, geometry = conv_affine_native(kn, s, p, d, g, act, residual)
    args = (ms.Tensor(x), ms.Tensor(wt), ms.Tensor(scale), ms.Tensor(shift), s, p, g, d, act,
            None if res is None else ms.Tensor(res), residual)
    calls = native.load().conv_calls
    got = conv2d_affine(kn, op, geometry, *args).asnumpy()
    assert native.load().conv_calls == calls + 1
    composed = conv2d_affine(kn, None, None, *args).asnumpy()
    assert got.shape == want.shape
    scale_ = np.abs(want).max()
    assert np.abs(got - want).max() < 2e-6 * scale_ and np.abs(composed - want).max() < 2e-6 * scale_


@pytest.mark.parametrize("shape", [(1, 3, 9, 11), (2, 4, 1, 5), (1, 2, 6, 1), (1, 1, 1, 1), (1, 32, 40, 40)])
def test_pad_max_pool_native_matches_the_reference_rule(shape, pynative_cpu):
    """PadMaxPool2 (HGNetV2's stem: a zero row and column padded on the bottom and right, then MaxPool2d(2, stride
    1)) against the rule in NumPy and the composed form, bit for bit, on maps of negative and positive values (a
    window at the edge takes the padding's 0 over negatives), one-row and one-column maps included."""
    from ms_ocr.layout.backbone import _pad_max_pool
    kn = pynative_cpu
    if kn.pad_max_pool is None:
        pytest.fail("PadMaxPool2 is not routed on this machine (native library, CONV_ROUTES)")
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    p = np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 1)))
    want = np.maximum(np.maximum(p[:, :, :-1, :-1], p[:, :, 1:, :-1]), np.maximum(p[:, :, :-1, 1:], p[:, :, 1:, 1:]))
    got = _pad_max_pool(kn, ms.Tensor(x)).asnumpy()
    composed = _pad_max_pool(COMPOSED, ms.Tensor(x)).asnumpy()
    assert got.shape == shape and np.array_equal(got, want) and np.array_equal(composed, want)
    assert (got[:, :, -1, -1] == np.maximum(x[:, :, -1, -1], 0)).all()
