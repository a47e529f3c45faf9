"""DeepSeek-OCR (deepseek-ai/DeepSeek-OCR, v1, 3B MoE): DeepEncoder (SAM + CLIP-L) + DeepSeek MoE decoder.

Declared in spec.py; loaded through ms_ocr.models.get("deepseek-ocr").load(model_dir[, mode=...])."""

from ms_ocr.models.deepseek_ocr.spec import SPEC

__all__ = ["SPEC"]
