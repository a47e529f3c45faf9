"""PaddleOCR-VL 0.9B (PaddlePaddle/PaddleOCR-VL): NaViT SigLIP + mlp_AR projector + ERNIE-4.5-0.3B."""

import time

import numpy as np

from ms_ocr.config_utils import load_config_json
from ms_ocr.models.loading import load_pipeline, resolve_tied_head
from ms_ocr.models.paddleocr_vl.config import PaddleOCRVLConfig
from ms_ocr.models.paddleocr_vl.convert import name_table
from ms_ocr.models.paddleocr_vl.model import PaddleOCRVLModel
from ms_ocr.models.paddleocr_vl.processor import TASK_PROMPTS, PaddleOCRVLProcessor
from ms_ocr.processing import grid as G
from ms_ocr.runtime import VisionInputs

NUM_POS_AXES = 3
# document pipeline: the task (TASK_PROMPTS key) each kind of layout region is recognised with
REGION_TASKS = {"text": "ocr", "table": "table", "formula": "formula", "chart": "chart"}


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


def config_from_dir(model_dir):
    cfg = PaddleOCRVLConfig.from_dict(load_config_json(model_dir))
    return resolve_tied_head(cfg, model_dir, name_table(cfg))


def build(cfg):
    return PaddleOCRVLModel(cfg)


def host_side(model_dir):
    """What runs outside the graphs: config, processor, per-image vision inputs (also for MindIR serving)."""
    cfg = config_from_dir(model_dir)
    return {"cfg": cfg, "processor": PaddleOCRVLProcessor.from_pretrained(model_dir, cfg),
            "vision_inputs": lambda out: vision_inputs(cfg, out)}


def load(model_dir, target="CPU", dtype="auto", buckets=None):
    """Build the pipeline for a hub or converted checkpoint folder."""
    t0 = time.perf_counter()
    host = host_side(model_dir)
    cfg = host["cfg"]
    return load_pipeline("paddleocr-vl", model_dir, cfg, host["processor"], build(cfg), name_table(cfg),
                         host["vision_inputs"], NUM_POS_AXES, t0, target, dtype, buckets)


__all__ = ["load", "host_side", "build", "config_from_dir", "name_table", "vision_inputs", "TASK_PROMPTS"]
