"""DeepSeek-OCR's host side: per-view graph inputs, and the grounding output parsed into boxes."""

from ms_ocr.models.deepseek_ocr.grounding import parse_grounding
from ms_ocr.nn.deepencoder_v1 import view_items
from ms_ocr.runtime import VisionInputs


def vision_inputs(cfg, processed):
    return [VisionInputs(embed=views, head=head) for views, head in view_items(cfg, processed)]


def postprocess(text, task, images):
    extras = {}
    if len(images) == 1 and "<|ref|>" in text:
        items, markdown = parse_grounding(text, images[0].width, images[0].height)
        extras["grounding"] = items
        extras["boxes"] = [{"text": i["label"], "box": b} for i in items for b in i["boxes"]]
        text = markdown
    return text, extras
