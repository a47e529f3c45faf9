"""The DeepEncoder-v1 host preprocessing of DeepSeek-OCR (v1) and Unlimited-OCR: the official DeepSeek-OCR
process/image_process.py behaviour (written from its
documented rules; checked against golden numbers of the official code).

Modes (base_size, image_size, crop): tiny (512, 512, no), small (640, 640, no), base (1024, 1024, no),
large (1280, 1280, no), gundam (1024, 640, yes). Sizes scale with the checkpoint's SAM input size (1024 for
the released model) so tiny test models keep the same geometry.
- Tiles (gundam only, and only when the image is larger than 640 on some side): the (w, h) tile grid with
  2 <= w*h <= max_crops (DeepSeek-OCR 6, Unlimited-OCR 32) whose aspect ratio is closest to the image's (candidates in the official order; on an exact
  tie a later candidate wins when the image area exceeds half the tiled area), the image stretched to the
  grid (PIL bicubic) and cut row-major.
- Global view: tiny/small first stretch the image to a square; every mode then pads it to base_size with
  (127, 127, 127), aspect kept, centred (PIL ImageOps.pad).
- Pixels: ToTensor then Normalize(0.5, 0.5) in float32.
- Text: the prompt as given when it places one `<image>` per image, else "<image>" + `image_sep` per image before
  it (DeepSeek-OCR "\\n", Unlimited-OCR "").
- Tokens: [bos] + text before `<image>` + N image tokens + text after; N = n_b (n_b + 1) + 1 (+ (h_t n)(w_t n + 1)
  with tiles), n_b = ceil(base / 64), n = ceil(image / 64).
"""

import math

import numpy as np
from PIL import Image, ImageOps

from ms_ocr.config_utils import CheckpointError
from ms_ocr.processing.deepseek import IMAGE_TOKEN, closest_grid, place_images
from ms_ocr.processing.image import ImageError, to_rgb
from ms_ocr.processing.tokenizer import Tokenizer

MODES = {"tiny": (512, 512, False), "small": (640, 640, False), "base": (1024, 1024, False),
         "large": (1280, 1280, False), "gundam": (1024, 640, True)}
MIN_CROPS = 2
PAD = (127, 127, 127)


def candidate_grids(lo, hi):
    """(width tiles, height tiles) in the official order: a set of pairs sorted (stably) by area."""
    grids = set((i, j) for n in range(lo, hi + 1) for i in range(1, n + 1) for j in range(1, n + 1)
                if lo <= i * j <= hi)
    return sorted(grids, key=lambda g: g[0] * g[1])


def to_pixels(img):
    """ToTensor + Normalize(0.5, 0.5): [3, H, W] float32."""
    x = np.asarray(img, np.uint8).transpose(2, 0, 1).astype(np.float32) / np.float32(255.0)
    return ((x - np.float32(0.5)) / np.float32(0.5)).astype(np.float32)


class DeepEncoderV1Processor:
    """A model sets max_crops (the tile grid's largest tile count) and image_sep (after each placed `<image>`)."""

    max_crops = image_sep = None

    def __init__(self, tokenizer, image_token_id, bos_id, mode="gundam", scale=1.0):
        self.grids = candidate_grids(MIN_CROPS, self.max_crops)
        self.tokenizer = tokenizer
        self.image_token_id = int(image_token_id)
        self.bos_id = int(bos_id)
        self.scale = scale
        self.set_mode(mode)
        if tokenizer.id_to_token(self.image_token_id) is None:
            raise CheckpointError(f"image_token_id {image_token_id} is not a token of the tokenizer")

    @classmethod
    def from_pretrained(cls, model_dir, cfg, mode="gundam"):
        return cls(Tokenizer.from_dir(model_dir), cfg.image_token_id, cfg.text.bos_token_id, mode,
                   cfg.sam["image_size"] / 1024)

    def set_mode(self, mode):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of: {', '.join(MODES)}")
        base, image, crop = MODES[mode]
        self.mode = mode
        self.base, self.image, self.crop = round(base * self.scale), round(image * self.scale), crop
        self.threshold = round(640 * self.scale)

    def view_sizes(self):
        """The square view sides this mode produces (global view, tiles)."""
        return sorted({self.base, self.image} if self.crop else {self.base})

    def views(self, img):
        """(tiles [n, 3, t, t] float32 or None, (w_t, h_t) or None, global [1, 3, B, B] float32)."""
        rgb = to_rgb(img)
        w, h = rgb.size
        if w == 0 or h == 0:
            raise ImageError(f"image has zero size ({w}x{h})")
        tiles, grid = None, None
        if self.crop and not (w <= self.threshold and h <= self.threshold):
            grid = closest_grid(w, h, self.image, self.grids)
            if grid != (1, 1):
                big = rgb.resize((self.image * grid[0], self.image * grid[1]), resample=Image.Resampling.BICUBIC)
                tiles = np.stack([to_pixels(big.crop((c * self.image, r * self.image, (c + 1) * self.image,
                                                      (r + 1) * self.image)))
                                  for r in range(grid[1]) for c in range(grid[0])])
            else:
                grid = None
        glob = rgb
        if self.image <= self.threshold and not self.crop:
            glob = glob.resize((self.image, self.image), resample=Image.Resampling.BICUBIC)
        glob = ImageOps.pad(glob, (self.base, self.base), color=PAD)
        return tiles, grid, to_pixels(glob)[None]

    def image_token_count(self, grid):
        nb, n = math.ceil(self.base / 64), math.ceil(self.image / 64)
        count = nb * (nb + 1) + 1
        if grid is not None:
            count += (grid[1] * n) * (grid[0] * n + 1)
        return count

    def __call__(self, images, prompt):
        images = [images] if isinstance(images, Image.Image) else list(images)
        views = [self.views(img) for img in images]
        text = place_images(prompt, len(images), self.image_sep)
        parts = text.split(IMAGE_TOKEN)
        ids = [self.bos_id] + self.tokenizer.encode(parts[0], add_special_tokens=False)
        for (_, grid, _), rest in zip(views, parts[1:], strict=True):
            ids += [self.image_token_id] * self.image_token_count(grid)
            ids += self.tokenizer.encode(rest, add_special_tokens=False)
        input_ids = np.array(ids, np.int64)
        return {"input_ids": input_ids, "views": views, "position_ids": np.arange(len(ids), dtype=np.int64)[None],
                "rope_delta": 0, "text": text}

    def decode(self, ids, skip_special_tokens=True):
        """Text with the grounding markup kept (`<|ref|>`, `<|det|>` are special tokens): only BOS is dropped,
        as the official scripts decode without skipping special tokens (EOS is cut by the caller)."""
        return self.tokenizer.decode([i for i in ids if i != self.bos_id], skip_special_tokens=False)
