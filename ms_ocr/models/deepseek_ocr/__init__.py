"""DeepSeek-OCR (deepseek-ai/DeepSeek-OCR, v1, 3B MoE): DeepEncoder (SAM + CLIP-L) + DeepSeek MoE decoder."""

import time

from ms_ocr.config_utils import load_config_json
from ms_ocr.models.deepseek_ocr.config import DeepseekOCRConfig
from ms_ocr.models.deepseek_ocr.convert import name_table
from ms_ocr.models.deepseek_ocr.grounding import parse_grounding
from ms_ocr.models.deepseek_ocr.model import DeepseekOCRModel
from ms_ocr.models.deepseek_ocr.processor import MODES, DeepseekOCRProcessor
from ms_ocr.models.deepseek_ocr.vision import assembly_index
from ms_ocr.models.loading import load_pipeline, resolve_tied_head
from ms_ocr.nn.sam import sam_tables
from ms_ocr.processing.resample import bicubic_aa_matrix
from ms_ocr.runtime import VisionInputs

TASK_PROMPTS = {
    "ocr": "Free OCR.",
    "markdown": "<|grounding|>Convert the document to markdown.",
    "grounding": "<|grounding|>OCR this image.",
    "figure": "Parse the figure.",
    "describe": "Describe this image in detail.",
}
BOX_TASKS = ("markdown", "grounding")
# document pipeline: the task (TASK_PROMPTS key) each kind of layout region is recognised with; DeepSeek-OCR has
# no table or formula prompt: tables go through its Markdown conversion (HTML tables), formulas through free OCR
# (LaTeX between \\[ \\])
REGION_TASKS = {"text": "ocr", "table": "markdown", "formula": "ocr", "chart": "figure"}
# The official scripts' n-gram blocking (ngram 30 within 90 generated tokens, table cells exempt).
NO_REPEAT = dict(size=30, window=90, exempt_tokens=("<td>", "</td>"))


def view_args(cfg, pixels):
    s = cfg.sam
    g = pixels.shape[-1] // s["patch"]
    tables = sam_tables(g, s["image_size"] // s["patch"], s["window"]).arrays()
    out_g = -(-pixels.shape[-1] // (s["patch"] * 4))
    return (pixels, *tables, bicubic_aa_matrix(cfg.clip["image_size"] // cfg.clip["patch"], out_g))


def vision_inputs(cfg, processed):
    out = []
    for tiles, grid, glob in processed["views"]:
        views = ([view_args(cfg, tiles)] if tiles is not None else []) + [view_args(cfg, glob)]
        tile_g = -(-tiles.shape[-1] // (cfg.sam["patch"] * 4)) if tiles is not None else 0
        glob_g = -(-glob.shape[-1] // (cfg.sam["patch"] * 4))
        out.append(VisionInputs(embed=views, head=(assembly_index(grid if tiles is not None else None, tile_g,
                                                                  glob_g),)))
    return out


def postprocess(text, task, images):
    extras = {}
    if len(images) == 1 and "<|ref|>" in text:
        items, markdown = parse_grounding(text, images[0].width, images[0].height)
        extras["grounding"] = items
        extras["boxes"] = [{"text": i["label"], "box": b} for i in items for b in i["boxes"]]
        text = markdown
    return text, extras


def config_from_dir(model_dir):
    cfg = DeepseekOCRConfig.from_dict(load_config_json(model_dir))
    return resolve_tied_head(cfg, model_dir, name_table(cfg))


def build(cfg):
    return DeepseekOCRModel(cfg)


def host_side(model_dir, mode="gundam"):
    """What runs outside the graphs: config, processor, per-image vision inputs, output handling (also for
    MindIR serving)."""
    cfg = config_from_dir(model_dir)
    return {"cfg": cfg, "processor": DeepseekOCRProcessor.from_pretrained(model_dir, cfg, mode),
            "vision_inputs": lambda out: vision_inputs(cfg, out), "postprocess": postprocess}


def load(model_dir, target="CPU", dtype="auto", buckets=None, mode="gundam"):
    t0 = time.perf_counter()
    host = host_side(model_dir, mode)
    cfg = host["cfg"]
    return load_pipeline("deepseek-ocr", model_dir, cfg, host["processor"], build(cfg), name_table(cfg),
                         host["vision_inputs"], 1, t0, target, dtype, buckets, postprocess=postprocess)


__all__ = ["load", "host_side", "build", "config_from_dir", "name_table", "vision_inputs", "TASK_PROMPTS", "MODES", "BOX_TASKS"]
