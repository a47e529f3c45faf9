"""Shared load path of the VLM packages: weights into the Cell, runtime, pipeline."""

import os
import time

from ms_ocr.config_utils import read_json
from ms_ocr.convert.loader import load_weights
from ms_ocr.convert.safetensors_io import checkpoint_dtypes, iter_checkpoint
from ms_ocr.device import resolve_dtype
from ms_ocr.vlm import VLMPipeline
from ms_ocr.runtime import Buckets, VLMRuntime


def eos_ids(model_dir, default):
    """generation_config.json's eos_token_id (int or list), else the config's."""
    path = os.path.join(model_dir, "generation_config.json")
    eos = read_json(path).get("eos_token_id") if os.path.isfile(path) else None
    if eos is None:
        eos = default
    return [eos] if isinstance(eos, int) else list(eos)


def load_pipeline(name, model_dir, cfg, processor, net, table, vision_inputs, num_pos_axes, t0, target="CPU",
                  dtype="auto", buckets=None, postprocess=None):
    """Load the checkpoint of `model_dir` into `net` (strict, via the rename `table`) and wrap it."""
    compute_dtype, round_to = resolve_dtype(dtype, target, checkpoint_dtypes(model_dir))
    load_weights(net, iter_checkpoint(model_dir), table, compute_dtype, round_to, source=model_dir)
    runtime = VLMRuntime(net, cfg.text.max_position_embeddings, pad_id=0, compute_dtype=compute_dtype,
                         buckets=buckets or Buckets())
    return VLMPipeline(name, model_dir, cfg, processor, runtime, vision_inputs, eos_ids(model_dir, cfg.text.eos_token_id),
                       num_pos_axes, cfg.image_token_id, load_seconds=time.perf_counter() - t0,
                       postprocess=postprocess)
