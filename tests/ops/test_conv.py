"""The composed convolution (unfold + matmul) against torch's conv2d, the reference semantics, for every form the
models use: k x k with padding, strided, depthwise, grouped, 1x1, unpadded 2x2, odd sizes; and the Conv2D branch
(Ascend, ONNX export) called with the same arguments gives the same result."""

import numpy as np
import pytest
import mindspore as ms

from ms_ocr.ops import backend
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
    backend.PORTABLE = fused  # the Conv2D branch, runnable on CPU
    try:
        got = conv2d(ms.Tensor(x), ms.Tensor(wt), s, p, g).asnumpy()
    finally:
        backend.PORTABLE = False
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
