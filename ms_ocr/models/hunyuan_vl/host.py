"""HunyuanOCR's host side: per-image arrays for the graphs, and the output post-processing."""

import numpy as np

from ms_ocr.models.hunyuan_vl.markdown import normalize_doc_parse_markdown
from ms_ocr.models.hunyuan_vl.postprocess import clean_repeated_substrings, parse_spotting, parse_spotting_json
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


SPOTTING_TASKS = ("spotting", "spotting_hunyuan")  # 1.0's spotting prompt, under its 1.0 and 1.5 names


def postprocess(text, task, images, clean_up_from=8000, normalize_doc_parse=False):
    """Tencent's order: the runaway-repeat cleanup (answers of `clean_up_from`+ characters; 1.0 8,000, 1.5 2,000:
    ModelSpec.postprocess_options), then for 1.5's doc_parse the markdown normalisation (markdown.py); spotting
    answers parsed into boxes in image pixels ("boxes"; a spotting_json answer that does not parse whole: the
    boxes that do and "notes", one line)."""
    text = clean_repeated_substrings(text, clean_up_from)
    if normalize_doc_parse and task == "doc_parse":
        text, _ = normalize_doc_parse_markdown(text)
    extras = {}
    if len(images) == 1 and task in SPOTTING_TASKS:
        extras["boxes"] = parse_spotting(text, images[0].width, images[0].height)
    elif len(images) == 1 and task == "spotting_json":
        extras["boxes"], note = parse_spotting_json(text, images[0].width, images[0].height)
        if note is not None:
            extras["notes"] = [note]
    return text, extras
