"""Host arrays into Tensors, Tensors with their own memory, Parameters freed for good."""

import numpy as np
import mindspore as ms
from mindspore import Tensor

from ms_ocr.convert.loader import adopt, device_tensor
from ms_ocr.nn.blocks import forget_graph_input


def host_tensor(array, float_dtype=ms.float32):
    """Host array -> Tensor: floats in `float_dtype`, integers as int32, booleans as they are."""
    array = np.asarray(array)
    if array.dtype == np.bool_:
        return Tensor(array)
    if np.issubdtype(array.dtype, np.floating):
        return Tensor(array.astype(np.float32), float_dtype)
    return Tensor(array.astype(np.int32))


def padded_rows(t, pad, axis):
    """A pool Tensor of its own holding `t` with `pad` zero rows appended along `axis` (0 or -2)."""
    a = t.asnumpy()
    if pad:
        width = [(0, 0)] * a.ndim
        width[axis] = (0, pad)
        a = np.pad(a, width)
    return device_tensor(a, t.dtype)


def release_weights(params):
    """Free Parameters' memory for good: each one's data becomes an empty Tensor, after the view graph_input keeps
    of it is dropped (a kept view holds the old buffer alive); the memory goes back to MindSpore's pool."""
    empty = Tensor(np.zeros(0, np.float32))
    for p in params:
        forget_graph_input(p)
        adopt(p, empty)
