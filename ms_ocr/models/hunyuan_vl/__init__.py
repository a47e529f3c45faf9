"""HunyuanOCR 1B (tencent/HunyuanOCR): ViT + perceive merger + HunYuan 0.5B dense decoder with XD-RoPE."""

import time

import numpy as np

from ms_ocr.config_utils import load_config_json
from ms_ocr.models.hunyuan_vl.config import HunyuanOCRConfig
from ms_ocr.models.hunyuan_vl.convert import name_table
from ms_ocr.models.hunyuan_vl.model import HunyuanOCRModel
from ms_ocr.models.hunyuan_vl.postprocess import clean_repeated_substrings, parse_spotting
from ms_ocr.models.hunyuan_vl.processor import HunyuanOCRProcessor
from ms_ocr.models.loading import load_pipeline, resolve_tied_head
from ms_ocr.processing import grid as G
from ms_ocr.runtime import VisionInputs

# The prompts HunyuanOCR's README recommends (its Chinese prompts, as Tencent's scripts send them).
TASK_PROMPTS = {
    "ocr": "提取图中的文字。",
    "spotting": "检测并识别图片中的文字，将文本坐标格式化输出。",
    "parse": "提取文档图片中正文的所有信息用markdown格式表示，其中页眉、页脚部分忽略，表格用html格式表达，"
             "文档中公式用latex格式表示，按照阅读顺序组织进行解析。",
    "formula": "识别图片中的公式，用LaTeX格式表示。",
    "table": "把图中的表格解析为HTML。",
    "chart": "解析图中的图表，对于流程图使用Mermaid格式表示，其他图表使用Markdown格式表示。",
    "subtitles": "提取图片中的字幕。",
    "translate": "先提取文字，再将文字内容翻译为英文。若是文档，则其中页眉、页脚忽略。公式用latex格式表示，表格用html格式表示。",
}
BOX_TASKS = ("spotting",)
# document pipeline: the task (TASK_PROMPTS key) each kind of layout region is recognised with
REGION_TASKS = {"text": "ocr", "table": "table", "formula": "formula", "chart": "chart"}


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
    if task in BOX_TASKS and len(images) == 1:
        extras["boxes"] = parse_spotting(text, images[0].width, images[0].height)
    return text, extras


def config_from_dir(model_dir):
    cfg = HunyuanOCRConfig.from_dict(load_config_json(model_dir))
    return resolve_tied_head(cfg, model_dir, name_table(cfg))


def build(cfg):
    return HunyuanOCRModel(cfg)


def host_side(model_dir):
    """What runs outside the graphs: config, processor, per-image vision inputs, output handling (also for
    MindIR serving)."""
    cfg = config_from_dir(model_dir)
    return {"cfg": cfg, "processor": HunyuanOCRProcessor.from_pretrained(model_dir, cfg),
            "vision_inputs": lambda out: vision_inputs(cfg, out), "postprocess": postprocess}


def load(model_dir, target="CPU", dtype="auto", buckets=None):
    """Build the pipeline for a hub or converted checkpoint folder."""
    t0 = time.perf_counter()
    host = host_side(model_dir)
    cfg = host["cfg"]
    return load_pipeline("hunyuan-ocr", model_dir, cfg, host["processor"], build(cfg), name_table(cfg),
                         host["vision_inputs"], len(cfg.text.xdrope_section), t0, target, dtype,
                         buckets, postprocess=postprocess)


__all__ = ["load", "host_side", "build", "config_from_dir", "name_table", "vision_inputs", "TASK_PROMPTS", "BOX_TASKS"]
