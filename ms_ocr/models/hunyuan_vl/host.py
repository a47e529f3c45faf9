"""HunyuanOCR's host side: per-image arrays for the graphs, and the output post-processing."""

import numpy as np

from ms_ocr.models.hunyuan_vl.postprocess import clean_repeated_substrings, parse_spotting
from ms_ocr.models.hunyuan_vl.spec import SPEC
from ms_ocr.processing import grid as G
from ms_ocr.runtime import VisionInputs


def row_index(grid, merge):
    """Merged-token order of the perceive output: each row's W tokens then the newline (index H*W)."""
    h, w = grid[1] // merge, grid[2] // merge
    idx = np.concatenate([np.arange(h * w).reshape(h, w), np.full((h, 1), h * w)], 1)
    return idx.reshape(-1).astype(np.int32)


def vision_inputs(cfg, processed):
    """Per-image VisionInputs: embed (patches, position-table taps past row 0, weights), head (2x2 windows,
    row order with newlines)."""
    grids = [tuple(int(v) for v in g) for g in processed["image_grid_thw"]]
    patches = np.asarray(processed["pixel_values"], np.float32)
    side = cfg.vision.max_image_size // cfg.vision.patch_size
    merge = cfg.vision.spatial_merge_size
    out, start = [], 0
    for grid in grids:
        n = grid[0] * grid[1] * grid[2]
        interp_idx, interp_w = G.interpolation_table([grid], side)
        out.append(VisionInputs(embed=(patches[start:start + n], interp_idx + 1, interp_w),
                                head=(G.merge_index([grid], merge), row_index(grid, merge))))
        start += n
    return out


def postprocess(text, task, images):
    """The reference's runaway-repeat cleanup; spotting output parsed into boxes in image pixels."""
    text = clean_repeated_substrings(text)
    extras = {}
    if task in SPEC.box_tasks and len(images) == 1:
        extras["boxes"] = parse_spotting(text, images[0].width, images[0].height)
    return text, extras
