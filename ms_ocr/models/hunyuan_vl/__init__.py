"""HunyuanOCR 1B (tencent/HunyuanOCR): ViT + perceive merger + HunYuan 0.5B dense decoder with XD-RoPE.

Declared in spec.py; loaded through ms_ocr.models.get("hunyuan-ocr").load(model_dir)."""

from ms_ocr.models.hunyuan_vl.spec import SPEC

__all__ = ["SPEC"]
