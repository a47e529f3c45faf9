"""PaddleOCR-VL 0.9B (PaddlePaddle/PaddleOCR-VL): NaViT SigLIP + mlp_AR projector + ERNIE-4.5-0.3B.

Declared in spec.py; loaded through ms_ocr.models.get("paddleocr-vl").load(model_dir)."""

from ms_ocr.models.paddleocr_vl.spec import SPEC

__all__ = ["SPEC"]
