"""Unlimited-OCR's host side: per-view graph inputs (the DeepEncoder-v1's), and its layout output parsed into boxes:
`<|det|>label [x1, y1, x2, y2]<|/det|>text` blocks (0-999 scale of the page), pages separated by `<PAGE>`."""

import re

from ms_ocr.nn.deepencoder_v1 import view_items
from ms_ocr.runtime import VisionInputs

# UnlimitedOcrProcessor's block pattern (transformers 5.25 processing_unlimited_ocr.py)
_BLOCK = re.compile(r"<\|det\|>(\S+) \[(\d+), (\d+), (\d+), (\d+)\]<\|/det\|>(.*?)(?=<\|det\|>|<PAGE>|\Z)", re.DOTALL)


def vision_inputs(cfg, processed):
    return [VisionInputs(embed=views, head=head) for views, head in view_items(cfg, processed)]


def parse_blocks(text, width, height):
    """(items {"label", "box" in pixels, "text"}, the text with the markup removed) of one page's output."""
    items = []
    for m in _BLOCK.finditer(text):
        x1, y1, x2, y2 = (int(v) for v in m.group(2, 3, 4, 5))
        box = [int(x1 / 999 * width), int(y1 / 999 * height), int(x2 / 999 * width), int(y2 / 999 * height)]
        items.append({"label": m.group(1), "box": box, "text": m.group(6).strip()})
    return items, re.sub(r"<\|det\|>.*?<\|/det\|>", "", text)


def postprocess(text, task, images):
    extras = {}
    if len(images) == 1 and "<|det|>" in text:
        items, text = parse_blocks(text, images[0].width, images[0].height)
        extras["blocks"] = items
        extras["boxes"] = [{"text": i["label"], "box": i["box"]} for i in items]
    return text, extras
