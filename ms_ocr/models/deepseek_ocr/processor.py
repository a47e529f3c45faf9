"""DeepSeek-OCR (v1) host preprocessing: the DeepEncoder-v1 processor (ms_ocr/processing/deepencoder_v1.py) with
at most 6 tiles and "<image>\\n" before a prompt that places no image itself."""

from ms_ocr.processing.deepencoder_v1 import MIN_CROPS, MODES, DeepEncoderV1Processor, candidate_grids, to_pixels
from ms_ocr.processing.deepseek import closest_grid as _closest_grid

MAX_CROPS = 6

__all__ = ["MODES", "DeepseekOCRProcessor", "candidate_grids", "closest_grid", "to_pixels"]


def closest_grid(width, height, tile, grids=None):
    return _closest_grid(width, height, tile, grids or candidate_grids(MIN_CROPS, MAX_CROPS))


class DeepseekOCRProcessor(DeepEncoderV1Processor):
    max_crops, image_sep = MAX_CROPS, "\n"
