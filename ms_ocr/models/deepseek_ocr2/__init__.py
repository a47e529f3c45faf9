"""DeepSeek-OCR-2 (deepseek-community/DeepSeek-OCR-2, deepseek-ai/DeepSeek-OCR-2): SAM + Qwen2 query encoder +
DeepSeek MoE decoder."""

import time

import numpy as np

from ms_ocr.config_utils import load_config_json
from ms_ocr.models.deepseek_ocr2.config import DeepseekOCR2Config
from ms_ocr.models.deepseek_ocr2.convert import name_table
from ms_ocr.models.deepseek_ocr2.model import DeepseekOCR2Model
from ms_ocr.models.deepseek_ocr2.processor import DeepseekOCR2Processor
from ms_ocr.models.deepseek_ocr2.vision import hybrid_visible
from ms_ocr.models.loading import load_pipeline, resolve_tied_head
from ms_ocr.nn.sam import sam_tables
from ms_ocr.runtime import VisionInputs

# DeepSeek-OCR's documented prompts (after the "<image>\n" the processor puts first).
TASK_PROMPTS = {
    "ocr": "Free OCR.",
    "markdown": "<|grounding|>Convert the document to markdown.",
    "figure": "Parse the figure.",
    "describe": "Describe this image in detail.",
}
# document pipeline: the task (TASK_PROMPTS key) each kind of layout region is recognised with (as DeepSeek-OCR)
REGION_TASKS = {"text": "ocr", "table": "markdown", "formula": "ocr", "chart": "figure"}


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


def config_from_dir(model_dir):
    cfg = DeepseekOCR2Config.from_dict(load_config_json(model_dir))
    return resolve_tied_head(cfg, model_dir, name_table(cfg))


def build(cfg):
    return DeepseekOCR2Model(cfg)


def host_side(model_dir):
    """What runs outside the graphs: config, processor, per-image vision inputs (also for MindIR serving)."""
    cfg = config_from_dir(model_dir)
    return {"cfg": cfg, "processor": DeepseekOCR2Processor.from_pretrained(model_dir, cfg),
            "vision_inputs": lambda out: vision_inputs(cfg, out)}


def load(model_dir, target="CPU", dtype="auto", buckets=None):
    t0 = time.perf_counter()
    host = host_side(model_dir)
    cfg = host["cfg"]
    return load_pipeline("deepseek-ocr2", model_dir, cfg, host["processor"], build(cfg), name_table(cfg),
                         host["vision_inputs"], 1, t0, target, dtype, buckets)


__all__ = ["load", "host_side", "build", "config_from_dir", "name_table", "vision_inputs", "TASK_PROMPTS"]
