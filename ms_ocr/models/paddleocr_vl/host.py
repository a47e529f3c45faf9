"""PaddleOCR-VL's host side: what the graphs take per image besides the pixels, the images and answers of the
1.5 tasks (spotting)."""

import numpy as np
from PIL import Image

from ms_ocr.models.paddleocr_vl.postprocess import parse_spotting
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


SPOTTING_UPSCALE_BELOW = 1500  # PaddleX pre_process_for_spotting: both sides under this -> twice the size (LANCZOS)


def task_image(image, task):
    """The image PaddleX 3.4 sends for `task` (its pipeline's pre_process_for_spotting; the model card does the
    same): for spotting, an image with both sides under 1,500 px at twice its size, LANCZOS; otherwise as given."""
    if task == "spotting" and image.width < SPOTTING_UPSCALE_BELOW and image.height < SPOTTING_UPSCALE_BELOW:
        return image.resize((image.width * 2, image.height * 2), Image.Resampling.LANCZOS)
    return image


def postprocess(text, task, images):
    """Spotting: the answer as the model wrote it (its <|LOC_n|> tokens kept) and its items parsed into `boxes`
    in pixels of the image as given; other tasks as they are."""
    if task == "spotting" and len(images) == 1:
        return text, {"boxes": parse_spotting(text, images[0].width, images[0].height)}
    return text, {}
