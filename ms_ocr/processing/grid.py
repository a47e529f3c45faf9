"""Per-patch index tables for packed NaViT-style images, computed on the host in NumPy.

Mirrors transformers' vision_utils helpers (interpolation taps, vision position ids) so the graphs only
gather and multiply.
"""

import numpy as np


def axis_taps(index, size, side, align_corners=False, mode="bilinear"):
    """Taps and weights on one axis to resample a `side`-long table to `size` outputs at `index`.

    Same arithmetic as F.interpolate (half-pixel centres unless align_corners, border clamping), in
    float32 like the reference. Returns int taps [n, 2] and float32 weights [n, 2].
    """
    index = np.asarray(index, np.float32)
    size = np.asarray(size, np.float32)
    if align_corners:
        src = index * np.float32(side - 1) / np.maximum(size - 1, 1).astype(np.float32)
    else:
        src = (index + np.float32(0.5)) * np.float32(side) / size - np.float32(0.5)
    src = src.astype(np.float32)
    if mode != "bilinear":
        raise ValueError(f"unsupported interpolation mode {mode!r}")
    floor = np.floor(src)
    offsets = np.arange(0, 2, dtype=np.float32)
    raw = floor[:, None].astype(np.int64) + offsets.astype(np.int64)
    taps = np.clip(raw, 0, side - 1)
    distance = np.abs(src[:, None] - floor[:, None] - offsets).astype(np.float32)
    weights = np.maximum(np.float32(1) - distance, np.float32(0)).astype(np.float32)
    return taps, weights


def interpolation_table(grids, side, align_corners=False):
    """Bilinear taps into a square side x side table for every patch of every (t, h, w) grid, raster order.

    Returns indices [N, 4] int32 and weights [N, 4] float32 (row-major outer product of the axis taps).
    """
    rows, cols, heights, widths = [], [], [], []
    for t, h, w in grids:
        r, c = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        for _ in range(t):
            rows.append(r.ravel()); cols.append(c.ravel())
            heights.append(np.full(h * w, h)); widths.append(np.full(h * w, w))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    h_taps, h_w = axis_taps(rows, np.concatenate(heights), side, align_corners)
    w_taps, w_w = axis_taps(cols, np.concatenate(widths), side, align_corners)
    idx = (h_taps[:, :, None] * side + w_taps[:, None, :]).reshape(-1, 4)
    wts = (h_w[:, :, None] * w_w[:, None, :]).reshape(-1, 4)
    return idx.astype(np.int32), wts.astype(np.float32)


def patch_positions(grids):
    """(row, col) of every patch, raster order per image: [N, 2] int32."""
    out = []
    for t, h, w in grids:
        r, c = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        out.extend([np.stack([r.ravel(), c.ravel()], 1)] * t)
    return np.concatenate(out).astype(np.int32)


def merge_index(grids, merge):
    """For each merged token, the `merge x merge` patch indices in (row offset, col offset) order: [M, m*m]."""
    out, start = [], 0
    for t, h, w in grids:
        base = np.arange(t * h * w).reshape(t, h // merge, merge, w // merge, merge) + start
        out.append(base.transpose(0, 1, 3, 2, 4).reshape(-1, merge * merge))
        start += t * h * w
    return np.concatenate(out).astype(np.int32)


def bucket(n, step, minimum=None):
    """Round n up to a multiple of `step` (at least `minimum`): the shape buckets graphs compile for."""
    n = max(n, minimum or 1)
    return ((n + step - 1) // step) * step
