"""DeepSeek-OCR (v1) as one Cell: the DeepEncoder-v1 VLM (ms_ocr/nn/deepencoder_v1.py) with full causal attention."""

from ms_ocr.nn.deepencoder_v1 import DeepEncoderV1Model


class DeepseekOCRModel(DeepEncoderV1Model):
    pass
