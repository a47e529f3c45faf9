"""Unlimited-OCR as one Cell: the DeepEncoder-v1 VLM (ms_ocr/nn/deepencoder_v1.py), its decoder windowed by the
config's sliding_window (nn/decoder.py)."""

from ms_ocr.nn.deepencoder_v1 import DeepEncoderV1Model


class UnlimitedOCRModel(DeepEncoderV1Model):
    pass
