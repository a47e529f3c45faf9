"""Multimodal (t, h, w) rotary position ids on the host, as transformers' `get_rope_index` builds them.

Reference: PaddleOCRVLModel.get_rope_index / get_vision_position_ids (the Qwen2-VL scheme): a text run gets
1D positions repeated on the three axes; an image run gets its merged grid's (t, h, w) coordinates offset by
the running position, which then advances by max(h, w) / merge.
"""

import numpy as np


def vision_positions(start, grid, spatial_merge, temporal_merge=1):
    """[3, t*h*w] positions of one image's merged tokens (t, row, col), raster order, offset by `start`."""
    t, h, w = (int(grid[0]) // temporal_merge, int(grid[1]) // spatial_merge, int(grid[2]) // spatial_merge)
    tt, hh, ww = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
    return np.stack([tt.ravel(), hh.ravel(), ww.ravel()]).astype(np.int64) + start


def mrope_positions(token_types, grids, spatial_merge):
    """Position ids [3, S] int64 and rope delta (max position + 1 - S) for one sequence.

    `token_types` is 0 for text and 1 for image tokens; `grids` the (t, h, w) patch grid of each image in
    order. Each image takes exactly its t*h*w/merge^2 tokens, so two images with no text between them still
    get their own grids (transformers' run grouping would merge them into one run and fail).
    """
    token_types = np.asarray(token_types)
    grids = [tuple(int(v) for v in g) for g in grids]
    pieces, pos, i, image = [], 0, 0, 0
    while i < len(token_types):
        if token_types[i] == 0:
            j = i
            while j < len(token_types) and token_types[j] == 0:
                j += 1
            pieces.append(np.broadcast_to(np.arange(j - i, dtype=np.int64) + pos, (3, j - i)))
            pos += j - i
        else:
            if image >= len(grids):
                raise ValueError(f"more image tokens than the {len(grids)} image grid(s) account for")
            grid = grids[image]
            j = i + grid[0] * grid[1] * grid[2] // spatial_merge ** 2
            if j > len(token_types) or not np.all(token_types[i:j] == 1):
                raise ValueError(f"image {image} needs {j - i} consecutive image tokens at position {i}")
            pieces.append(vision_positions(pos, grid, spatial_merge))
            pos += max(grid[1], grid[2]) // spatial_merge
            image += 1
        i = j
    if image != len(grids):
        raise ValueError(f"{len(grids)} image grid(s) but image tokens for {image}")
    positions = np.concatenate(pieces, axis=1) if pieces else np.zeros((3, 0), np.int64)
    delta = int(positions.max()) + 1 - len(token_types) if len(token_types) else 0
    return np.ascontiguousarray(positions), delta
