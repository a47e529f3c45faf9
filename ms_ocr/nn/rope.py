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


def full_width_selector(sections, num_axes, layout):
    """One-hot [num_axes, D] over the duplicated table [f, f] (D = 2 * sum(sections)).

    "halves" (Qwen2-VL / ERNIE MRoPE): the sections split the D/2 frequencies and both halves repeat the
    choice, so a rotation pair shares one axis. "chunks" (HunyuanOCR XD-RoPE, HF
    `recomposition_frequencies`): the sections, doubled, split the full D columns of [f, f], so a pair
    (j, j + D/2) can take its two angles from different axes; reproduced as the reference does it.
    """
    if layout == "halves":
        sel = section_selector(sections, num_axes)
        return np.concatenate([sel, sel], 1)
    if layout == "chunks":
        return section_selector([2 * s for s in sections], num_axes)
    raise ValueError(f"unknown rope layout {layout!r}")


class MultiAxisRotary(nn.Cell):
    """cos/sin for positions given per axis, each column rotated by the axis its section names.

    With one axis this is plain 1D rope; with 3 axes and sections [16, 24, 24] it is Qwen2-VL/ERNIE MRoPE;
    layout "chunks" gives HunyuanOCR's XD-RoPE (see full_width_selector). `theta` is the rope base.
    Input pos [A, B, S] int; output cos, sin [B, 1, S, D]. `paired` tells apply_rope whether the two
    halves of every table row are equal.
    """

    def __init__(self, head_dim, theta, sections=None, num_axes=1, layout="halves"):
        super().__init__()
        sections = sections or [head_dim // 2]
        if sum(sections) != head_dim // 2:
            raise ValueError(f"rope sections {sections} must sum to head_dim/2 = {head_dim // 2}")
        self.inv_freq = Tensor(rope_inv_freq(head_dim, theta))
        self.selector = Tensor(full_width_selector(sections, num_axes, layout)[:, None, None, :])
        self.paired = layout == "halves" or num_axes == 1

    def construct(self, pos):
        freqs = pos.astype(ms.float32)[..., None] * self.inv_freq  # [A, B, S, D/2]
        emb = ops.concat((freqs, freqs), -1)
        emb = (emb * self.selector).sum(0)[:, None]  # [B, 1, S, D]; exact: other axes add x * 0
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
