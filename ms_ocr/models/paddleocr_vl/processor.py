"""PaddleOCR-VL host preprocessing (reference: transformers PaddleOCRVLImageProcessorPil + PaddleOCRVLProcessor).

Images: RGB, `smart_resize` to multiples of patch*merge with PIL bicubic, rescale, normalise, and cut into
[N, 3, 14, 14] patches in raster order. Text: the chat template rendered with the tokenizer's special tokens,
each image placeholder expanded to grid.prod() / merge^2 copies, then tokenised. MRoPE position ids are
computed here so the graphs receive them as tensors.
"""

import numpy as np

from ms_ocr.processing.chat import load_chat_template
from ms_ocr.processing.mrope import mrope_positions
from ms_ocr.processing.settings import read_image_settings as _read_settings
from ms_ocr.processing.settings import smart_resize as _smart_resize
from ms_ocr.processing.tokenizer import Tokenizer
from ms_ocr.processing.vlm_processor import VLMProcessor, check_patch_settings

# Class defaults of PaddleOCRVLImageProcessorPil, used where the preprocessor file omits a key.
IMAGE_DEFAULTS = dict(do_resize=True, resample=3, size={"shortest_edge": 384 * 384, "longest_edge": 1536 * 1536},
                      do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                      image_mean=[0.48145466, 0.4578275, 0.40821073], image_std=[0.26862954, 0.26130258, 0.27577711],
                      patch_size=14, temporal_patch_size=1, merge_size=2)


def smart_resize(height, width, factor=28, min_pixels=384 * 384, max_pixels=1536 * 1536):
    return _smart_resize(height, width, factor, min_pixels, max_pixels, enlarge_thin=True)


def read_image_settings(model_dir):
    return _read_settings(model_dir, IMAGE_DEFAULTS)


def patchify(pixels, patch, temporal_patch):
    """[C, H, W] float32 -> [gh*gw, C*t, p, p] in raster order (the temporal copies broadcast), gh, gw."""
    channels, height, width = pixels.shape
    gh, gw = height // patch, width // patch
    patches = pixels.reshape(channels, gh, patch, gw, patch).transpose(1, 3, 0, 2, 4)  # -> [gh, gw, C, p, p]
    patches = np.broadcast_to(patches[:, :, :, None], (gh, gw, channels, temporal_patch, patch, patch))
    return patches.reshape(gh * gw, channels * temporal_patch, patch, patch), gh, gw


class PaddleOCRVLProcessor(VLMProcessor):
    """Images + prompt -> model inputs (NumPy) for PaddleOCR-VL."""

    enlarge_thin = True

    @classmethod
    def from_pretrained(cls, model_dir, cfg):
        """Tokenizer, chat template and image settings of `model_dir`, checked against `cfg` (PaddleOCRVLConfig)."""
        settings = read_image_settings(model_dir)
        check_patch_settings(settings, cfg.vision)
        return cls(Tokenizer.from_dir(model_dir), load_chat_template(model_dir), settings, cfg.image_token_id)

    def patchify(self, pixels):
        """-> [n, 3*t, p, p] patches."""
        return patchify(pixels, self.settings.patch_size, self.settings.temporal_patch_size)

    def empty_patches(self):
        p = self.settings.patch_size
        return np.zeros((0, 3 * self.settings.temporal_patch_size, p, p), np.float32)

    def image_token_count(self, grid):
        return int(np.prod(grid)) // self.settings.merge_size ** 2

    def positions(self, token_types, grids):
        return mrope_positions(token_types, grids, self.settings.merge_size)
