"""Basic Cells with HF parameter names (`weight`, `bias`): Linear, Embedding, RMSNorm, LayerNorm. Like every Cell of
a model, they compute with the kernels bound to them (`self.kernels`, ms_ocr/ops/kernels.py bind)."""

import mindspore as ms
from mindspore import Parameter, nn, ops
from mindspore.common.initializer import initializer

from ms_ocr import ops as K
from ms_ocr.nn import functional as F


def zeros_param(shape, dtype=ms.float32):
    # Lazily initialised: nothing is allocated until the loader sets the real weights, so loading never
    # holds a zero-filled copy of the model beside the checkpoint (strict loading sets every weight).
    return Parameter(initializer("zeros", shape, dtype), requires_grad=False)


class Linear(nn.Cell):
    """y = x W^T + b with W stored [out, in] and MatMul(transpose_b) (never `.T` in construct)."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = zeros_param((out_features, in_features))
        self.has_bias = bias
        if bias:
            self.bias = zeros_param((out_features,))

    def construct(self, x):
        return F.linear(self.kernels, x, self.weight, self.bias if self.has_bias else None)


class Embedding(nn.Cell):
    def __init__(self, num_embeddings, dim):
        super().__init__()
        self.weight = zeros_param((num_embeddings, dim))

    def construct(self, ids):
        return ops.gather(self.weight, ids, 0)


class RMSNorm(nn.Cell):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = zeros_param((dim,))
        self.eps = eps

    def construct(self, x):
        return K.rms_norm(self.kernels, x, self.weight, self.eps)


class LayerNorm(nn.Cell):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = zeros_param((dim,))
        self.bias = zeros_param((dim,))
        self.eps = eps

    def construct(self, x):
        return F.layer_norm(self.kernels, x, self.weight, self.bias, self.eps)
