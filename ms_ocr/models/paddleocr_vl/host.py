"""PaddleOCR-VL's host-side arrays: what the graphs take per image besides the pixels."""

import numpy as np

from ms_ocr.processing import grid as G
from ms_ocr.runtime import VisionInputs


def vision_inputs(cfg, processed):
    """Per-image VisionInputs: embed (patches, position-table taps and weights, (row, col)), head (merge index)."""
    grids = [tuple(int(v) for v in g) for g in processed["image_grid_thw"]]
    patches = np.asarray(processed["pixel_values"], np.float32)
    side = cfg.vision.image_size // cfg.vision.patch_size
    out, start = [], 0
    for grid in grids:
        n = grid[0] * grid[1] * grid[2]
        interp_idx, interp_w = G.interpolation_table([grid], side)
        out.append(VisionInputs(embed=(patches[start:start + n], interp_idx, interp_w, G.patch_positions([grid])),
                                head=(G.merge_index([grid], cfg.vision.spatial_merge_size),)))
        start += n
    return out
