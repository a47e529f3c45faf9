"""Patch embedding: a stride == kernel conv computed as one matmul over flattened patches."""

from mindspore import nn

from ms_ocr import ops as K
from ms_ocr.nn.layers import Embedding, zeros_param


class PatchEmbed(nn.Cell):
    """Conv2d(C, dim, p, stride=p) applied to pre-cut patches [N, C, p, p] -> [N, dim].

    The weight keeps the conv layout [dim, C, p, p] so checkpoints load unchanged; flattening it is a
    free reshape and the contraction is the conv's (ops.linear.linear_conv: a bf16 weight under --dtype bf16's
    bf16 products is read as it is).
    """

    def __init__(self, in_channels, dim, patch_size, bias=True):
        super().__init__()
        self.weight = zeros_param((dim, in_channels, patch_size, patch_size))
        self.has_bias = bias
        if bias:
            self.bias = zeros_param((dim,))

    def construct(self, patches):
        return K.linear_conv(self.kernels, patches.reshape(patches.shape[0], -1), self.weight,
                             self.bias if self.has_bias else None)


class PatchEmbeddings(nn.Cell):
    """Patch embedding plus a learned position table resampled to the image's patch grid.

    The table (`position_embedding`, [num_positions, dim]) is read through 4 bilinear taps per patch whose
    indices and weights the host prepares (processing.grid.interpolation_table), so any grid size is a gather.
    """

    def __init__(self, in_channels, dim, patch_size, num_positions):
        super().__init__()
        self.patch_embedding = PatchEmbed(in_channels, dim, patch_size)
        self.position_embedding = Embedding(num_positions, dim)

    def construct(self, patches, interp_idx, interp_w):
        return self.patch_embedding(patches) + K.interp_rows(self.kernels, self.position_embedding.weight, interp_idx,
                                                             interp_w)
