"""ms_ocr: MindSpore-native inference for open OCR vision-language models."""

__version__ = "0.2.0"
