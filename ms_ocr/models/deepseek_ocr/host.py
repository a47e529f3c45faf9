"""DeepSeek-OCR's host side: per-view graph inputs, and the grounding output parsed into boxes."""

from ms_ocr.models.deepseek_ocr.grounding import parse_grounding
from ms_ocr.models.deepseek_ocr.vision import assembly_index
from ms_ocr.nn.sam import sam_tables
from ms_ocr.processing.resample import bicubic_aa_matrix
from ms_ocr.runtime import VisionInputs


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
