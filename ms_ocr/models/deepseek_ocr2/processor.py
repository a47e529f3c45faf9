"""DeepSeek-OCR-2 host preprocessing (reference: transformers DeepseekOcr2ImageProcessorPil + DeepseekOcr2Processor).

Views per image: images whose longer side exceeds the tile (768) are also cut into 2..6 tiles — the grid
with the aspect ratio closest to the image's (ties go to more tiles while the image area exceeds half of
the tiled area), the image resized (PIL bicubic) to the grid and cut row-major; the global view is the image
scaled so its longer side is 1024 (rounded), padded to a square with (127, 127, 127) centred. Pixels are
rescaled and normalised with mean = std = 0.5. Text: a prompt that places its own `<image>` placeholders (one
per image, as transformers' processor takes it) is used as given; a prompt without any gets "<image>\\n" per
image before it (DeepSeek-OCR's plain prompt format, no chat template). Each `<image>` is expanded to
256 + 144 * tiles + 1 tokens, BOS added by the tokenizer. Positions are plain 1D.
"""

import math

import numpy as np
from PIL import Image

from ms_ocr.config_utils import CheckpointError
from ms_ocr.processing.deepseek import IMAGE_TOKEN, closest_grid, place_images
from ms_ocr.processing.image import ImageError, normalize, rescale, to_chw_uint8, to_rgb
from ms_ocr.processing.settings import read_image_processor_dict
from ms_ocr.processing.tokenizer import Tokenizer

IMAGE_DEFAULTS = dict(size={"height": 1024, "width": 1024}, tile_size=768, min_patches=2, max_patches=6,
                      crop_to_patches=True, resample=3, rescale_factor=1 / 255, image_mean=[0.5, 0.5, 0.5],
                      image_std=[0.5, 0.5, 0.5], background_color=[127, 127, 127], do_rescale=True, do_normalize=True)
PATCH, DOWNSAMPLE = 16, 4


def read_settings(model_dir):
    raw = read_image_processor_dict(model_dir, required=False) or {}
    return {k: raw.get(k, v) for k, v in IMAGE_DEFAULTS.items()}


def aspect_grids(lo, hi):
    grids = [(w, h) for w in range(1, hi + 1) for h in range(1, hi + 1) if lo <= w * h <= hi]
    return sorted(grids, key=lambda g: g[0] * g[1])


def optimal_grid(height, width, tile, lo, hi):
    """(columns, rows) as transformers' get_optimal_tiled_canvas."""
    return closest_grid(width, height, tile, aspect_grids(lo, hi))


def pad_square(chw, color):
    c, h, w = chw.shape
    if h == w:
        return chw
    side = max(h, w)
    out = np.empty((c, side, side), chw.dtype)
    out[:] = np.asarray(color, chw.dtype)[:, None, None]
    if w > h:
        start = (side - h) // 2
        out[:, start:start + h, :] = chw
    else:
        start = (side - w) // 2
        out[:, :, start:start + w] = chw
    return out


class DeepseekOCR2Processor:
    mode = None  # no resolution modes

    def __init__(self, tokenizer, settings, image_token_id):
        self.tokenizer = tokenizer
        self.s = settings
        self.image_token_id = int(image_token_id)
        self.image_token = tokenizer.id_to_token(self.image_token_id)
        if self.image_token is None:
            raise CheckpointError(f"image_token_id {image_token_id} is not a token of the tokenizer")

    @classmethod
    def from_pretrained(cls, model_dir, cfg):
        return cls(Tokenizer.from_dir(model_dir), read_settings(model_dir), cfg.image_token_id)

    def _normalise(self, chw_u8):
        x = chw_u8
        if self.s["do_rescale"]:
            x = rescale(x, self.s["rescale_factor"])
        if self.s["do_normalize"]:
            x = normalize(x, self.s["image_mean"], self.s["image_std"])
        return np.asarray(x, np.float32)

    def view_sizes(self):
        """The square view sides these settings produce (global view, tiles)."""
        tile = int(self.s["tile_size"])
        return sorted({int(self.s["size"]["height"]), tile} if self.s["crop_to_patches"] else {tile})

    def views(self, img):
        """(tiles [n, 3, T, T] float32 or None, global [1, 3, G, G] float32)."""
        s = self.s
        rgb = to_rgb(img)
        w, h = rgb.size
        if w == 0 or h == 0:
            raise ImageError(f"image has zero size ({w}x{h})")
        resample = Image.Resampling(s["resample"])
        tile = int(s["tile_size"])
        tiles = None
        if s["crop_to_patches"] and max(w, h) > tile:
            cols, rows = optimal_grid(h, w, tile, s["min_patches"], s["max_patches"])
            big = to_chw_uint8(rgb.resize((tile * cols, tile * rows), resample=resample))
            tiles = np.stack([self._normalise(big[:, r * tile:(r + 1) * tile, c * tile:(c + 1) * tile])
                              for r in range(rows) for c in range(cols)])
        target = s["size"]["height"] if s["crop_to_patches"] else tile
        scale = target / max(w, h)
        new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
        glob = pad_square(to_chw_uint8(rgb.resize((new_w, new_h), resample=resample)), s["background_color"])
        return tiles, self._normalise(glob)[None]

    def image_token_count(self, tiles):
        g = math.ceil(self.s["size"]["height"] / PATCH / DOWNSAMPLE)
        t = math.ceil(self.s["tile_size"] / PATCH / DOWNSAMPLE)
        return g * g + t * t * (0 if tiles is None else len(tiles)) + 1

    def __call__(self, images, prompt):
        images = [images] if isinstance(images, Image.Image) else list(images)
        views = [self.views(img) for img in images]
        text = place_images(prompt, len(images))
        parts = text.split(IMAGE_TOKEN)
        counts = [self.image_token_count(t) for t, _ in views]
        expanded = parts[0] + "".join(self.image_token * n + rest for n, rest in zip(counts, parts[1:], strict=True))
        input_ids = np.array(self.tokenizer.encode(expanded, add_special_tokens=True), np.int64)
        mask = input_ids == self.image_token_id
        if int(mask.sum()) != sum(counts):
            raise ValueError(f"tokenised prompt has {int(mask.sum())} image tokens, expected {sum(counts)}")
        s = len(input_ids)
        return {"input_ids": input_ids, "views": views, "position_ids": np.arange(s, dtype=np.int64)[None],
                "rope_delta": 0, "text": text}

    def decode(self, ids, skip_special_tokens=True):
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
