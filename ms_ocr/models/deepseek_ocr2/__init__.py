"""DeepSeek-OCR-2 (deepseek-community/DeepSeek-OCR-2, deepseek-ai/DeepSeek-OCR-2): SAM + Qwen2 query encoder +
DeepSeek MoE decoder.

Declared in spec.py; loaded through ms_ocr.models.get("deepseek-ocr2").load(model_dir)."""

from ms_ocr.models.deepseek_ocr2.spec import SPEC

__all__ = ["SPEC"]
