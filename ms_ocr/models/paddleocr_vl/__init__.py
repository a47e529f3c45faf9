"""PaddleOCR-VL 0.9B (PaddlePaddle/PaddleOCR-VL): NaViT SigLIP + mlp_AR projector + ERNIE-4.5-0.3B."""

import os
import time

import numpy as np

from ms_ocr.config_utils import load_config_json, read_json
from ms_ocr.convert.loader import load_weights
from ms_ocr.convert.safetensors_io import checkpoint_dtypes, iter_checkpoint
from ms_ocr.device import resolve_dtype
from ms_ocr.models.paddleocr_vl.config import PaddleOCRVLConfig
from ms_ocr.models.paddleocr_vl.convert import name_table
from ms_ocr.models.paddleocr_vl.model import PaddleOCRVLModel
from ms_ocr.models.paddleocr_vl.processor import TASK_PROMPTS, PaddleOCRVLProcessor
from ms_ocr.pipeline import VLMPipeline
from ms_ocr.processing import grid as G
from ms_ocr.runtime import Buckets, VisionInputs, VLMRuntime

NUM_POS_AXES = 3


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


def eos_ids(model_dir, cfg):
    path = os.path.join(model_dir, "generation_config.json")
    eos = read_json(path).get("eos_token_id") if os.path.isfile(path) else None
    if eos is None:
        eos = cfg.text.eos_token_id
    return [eos] if isinstance(eos, int) else list(eos)


def config_from_dir(model_dir):
    return PaddleOCRVLConfig.from_dict(load_config_json(model_dir))


def build(cfg):
    return PaddleOCRVLModel(cfg)


def load(model_dir, target="CPU", dtype="auto", buckets=None):
    """Build the pipeline for a hub or converted checkpoint folder."""
    t0 = time.perf_counter()
    cfg = config_from_dir(model_dir)
    processor = PaddleOCRVLProcessor.from_pretrained(model_dir, cfg)
    compute_dtype, round_to = resolve_dtype(dtype, target, checkpoint_dtypes(model_dir))
    net = build(cfg)
    load_weights(net, iter_checkpoint(model_dir), name_table(cfg), compute_dtype, round_to, source=model_dir)
    buckets = buckets or Buckets()
    runtime = VLMRuntime(net, cfg.text.max_position_embeddings, pad_id=0, compute_dtype=compute_dtype,
                         buckets=buckets)
    return VLMPipeline("paddleocr-vl", model_dir, cfg, processor, runtime,
                       lambda out: vision_inputs(cfg, out), eos_ids(model_dir, cfg),
                       NUM_POS_AXES, cfg.image_token_id, load_seconds=time.perf_counter() - t0)


__all__ = ["load", "build", "config_from_dir", "name_table", "vision_inputs", "TASK_PROMPTS"]
