"""DeepSeek-OCR (v1)'s DeepEncoder: ms_ocr/nn/deepencoder_v1.py (shared with Unlimited-OCR)."""

from ms_ocr.nn.deepencoder_v1 import DeepEncoderV1, assembly_index

__all__ = ["DeepEncoderV1", "assembly_index"]
