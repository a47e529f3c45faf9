"""Unlimited-OCR (baidu/Unlimited-OCR, 3B MoE): DeepSeek-OCR v1's DeepEncoder and MoE decoder with reference
sliding-window attention (each token sees the prompt and the last `sliding_window` tokens).

Declared in spec.py; loaded through ms_ocr.models.get("unlimited-ocr").load(model_dir[, mode=...])."""

from ms_ocr.models.unlimited_ocr.spec import SPEC

__all__ = ["SPEC"]
