"""DeepSeek-OCR-2's host side: per-view graph inputs."""

import numpy as np

from ms_ocr.models.deepseek_ocr2.vision import hybrid_visible
from ms_ocr.nn.sam import sam_tables
from ms_ocr.runtime import VisionInputs


def view_args(cfg, pixels):
    """Graph inputs of one view size: pixels [n, 3, S, S], SAM tables, encoder positions and mask."""
    s = cfg.sam
    tables = sam_tables(pixels.shape[-1] // s["patch"], s["image_size"] // s["patch"], s["window"]).arrays()
    p = (-(-pixels.shape[-1] // (s["patch"] * 4))) ** 2
    q = 144 if p <= 144 else 256
    return (pixels, *tables, np.arange(p + q, dtype=np.int32)[None, None], hybrid_visible(p, q))


def vision_inputs(cfg, processed):
    """Per image: VisionInputs whose `embed` lists its views (tiles first, then the global view)."""
    out = []
    for tiles, glob in processed["views"]:
        views = ([view_args(cfg, tiles)] if tiles is not None else []) + [view_args(cfg, glob)]
        out.append(VisionInputs(embed=views, head=()))
    return out
