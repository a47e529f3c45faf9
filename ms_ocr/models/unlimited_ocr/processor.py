"""Unlimited-OCR host preprocessing: the DeepEncoder-v1 processor (ms_ocr/processing/deepencoder_v1.py) with up to
32 tiles (UnlimitedOcrImageProcessor's max_patches) and "<image>" with nothing after it before a prompt that places
no image itself (its prompts are "<image>document parsing." and "<image>Multi page parsing.")."""

from ms_ocr.processing.deepencoder_v1 import DeepEncoderV1Processor


class UnlimitedOCRProcessor(DeepEncoderV1Processor):
    max_crops, image_sep = 32, ""
