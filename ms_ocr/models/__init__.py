"""Model packages, found by import: ms_ocr.models.<model_type>. CLI names map here."""

import importlib
import os

# CLI / user-facing names -> model package (the checkpoint's model_type).
ALIASES = {
    "paddleocr-vl": "paddleocr_vl",
    "paddleocr_vl": "paddleocr_vl",
    "hunyuan-ocr": "hunyuan_vl",
    "hunyuanocr": "hunyuan_vl",
    "hunyuan_vl": "hunyuan_vl",
    "deepseek-ocr": "deepseek_ocr",
    "deepseek_ocr": "deepseek_ocr",
    "deepseek-ocr2": "deepseek_ocr2",
    "deepseek-ocr-2": "deepseek_ocr2",
    "deepseek_ocr2": "deepseek_ocr2",
}

# Where the weights are published, for the "how to get them" message and optional download.
HUB_IDS = {
    "paddleocr_vl": "PaddlePaddle/PaddleOCR-VL",
    "hunyuan_vl": "tencent/HunyuanOCR",
    "deepseek_ocr": "deepseek-ai/DeepSeek-OCR",
    "deepseek_ocr2": "deepseek-ai/DeepSeek-OCR-2",
}
# The checkpoint ms_ocr targets lives in a subfolder of the hub repository (HunyuanOCR: the root holds 1.5).
HUB_SUBFOLDERS = {
    "hunyuan_vl": "v1.0",
}


def canonical(name):
    key = ALIASES.get(name) or ALIASES.get(name.lower())
    if key is None:
        raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(sorted(k for k in ALIASES if '-' in k))}")
    return key


def model_package(name):
    return importlib.import_module(f"ms_ocr.models.{canonical(name)}")


# The embedded demo checkpoint (scripts/train_demo.py): what `infer` runs when no --model is given and no weights
# are found. A demonstration of the port, not PaddleOCR-VL's accuracy (ms_ocr/demo/README.md).
DEMO_MODEL = "paddleocr-vl"
DEMO_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "demo", "paddleocr_vl")


def demo_checkpoint():
    """The demo checkpoint folder, or None while the package ships none."""
    return DEMO_DIR if os.path.isfile(os.path.join(DEMO_DIR, "config.json")) else None
