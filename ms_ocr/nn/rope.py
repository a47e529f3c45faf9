"""Rotary tables: 1D / multimodal (MRoPE, sectioned over several position axes) and 2D vision rope."""

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops


def rope_inv_freq(dim, theta):
    """1 / theta^(2i/dim) for i < dim/2, computed in float64 and rounded once to float32."""
    exponents = np.arange(0, dim, 2, dtype=np.float64) / dim
    return (1.0 / (float(theta) ** exponents)).astype(np.float32)


def section_selector(sections, num_axes):
    """One-hot [num_axes, sum(sections)]: frequency j takes its angle from axis (section index % num_axes)."""
    sel = np.zeros((num_axes, int(sum(sections))), np.float32)
    start = 0
    for i, width in enumerate(sections):
        sel[i % num_axes, start:start + width] = 1.0
        start += width
    return sel


class MultiAxisRotary(nn.Cell):
    """cos/sin for positions given per axis, frequency j rotated by the axis its section names.

    With one axis this is plain 1D rope; with 3 axes and sections [16, 24, 24] it is Qwen2-VL/ERNIE MRoPE
    (HF `recomposition_frequencies`). Input pos [A, B, S] int; output cos, sin [B, 1, S, D].
    """

    def __init__(self, head_dim, theta, sections=None, num_axes=1):
        super().__init__()
        inv = rope_inv_freq(head_dim, theta)
        sections = sections or [head_dim // 2]
        if sum(sections) != head_dim // 2:
            raise ValueError(f"rope sections {sections} must sum to head_dim/2 = {head_dim // 2}")
        self.inv_freq = Tensor(inv)
        self.selector = Tensor(section_selector(sections, num_axes)[:, None, None, :])

    def construct(self, pos):
        freqs = pos.astype(ms.float32)[..., None] * self.inv_freq  # [A, B, S, D/2]
        freqs = (freqs * self.selector).sum(0)  # exact: every other axis contributes x * 0
        emb = ops.concat((freqs, freqs), -1)[:, None]  # [B, 1, S, D]
        return ops.cos(emb), ops.sin(emb)


class VisionRotary2D(nn.Cell):
    """Axial 2D rope: the first half of the frequencies from the row, the second from the column.

    pos [N, 2] (row, col) -> cos, sin [1, 1, N, D] (HF PaddleOCRVisionRotaryEmbedding layout).
    """

    def __init__(self, head_dim, theta):
        super().__init__()
        self.inv_freq = Tensor(rope_inv_freq(head_dim // 2, theta))

    def construct(self, pos):
        freqs = pos.astype(ms.float32)[..., None] * self.inv_freq  # [N, 2, D/4]
        hw = ops.concat((freqs[:, 0], freqs[:, 1]), -1)
        emb = ops.concat((hw, hw), -1)[None, None]
        return ops.cos(emb), ops.sin(emb)
