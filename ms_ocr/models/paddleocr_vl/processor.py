"""PaddleOCR-VL host preprocessing (reference: transformers PaddleOCRVLImageProcessorPil + PaddleOCRVLProcessor).

Images: RGB, `smart_resize` to multiples of patch*merge with PIL bicubic, rescale, normalise, and cut into
[N, 3, 14, 14] patches in raster order. Text: the chat template rendered with the tokenizer's special tokens,
each image placeholder expanded to grid.prod() / merge^2 copies, then tokenised. MRoPE position ids are
computed here so the graphs receive them as tensors.
"""

import math
import os
from dataclasses import dataclass

import numpy as np
from PIL import Image

from ms_ocr.config_utils import CheckpointError, read_json
from ms_ocr.processing.chat import load_chat_template, render_chat
from ms_ocr.processing.image import ImageError, normalize, rescale, to_chw_uint8, to_rgb
from ms_ocr.processing.mrope import mrope_positions
from ms_ocr.processing.tokenizer import Tokenizer

TASK_PROMPTS = {"ocr": "OCR:", "table": "Table Recognition:", "formula": "Formula Recognition:",
                "chart": "Chart Recognition:"}

# Class defaults of PaddleOCRVLImageProcessorPil, used where the preprocessor file omits a key.
IMAGE_DEFAULTS = dict(do_resize=True, resample=3, size={"shortest_edge": 384 * 384, "longest_edge": 1536 * 1536},
                      do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                      image_mean=[0.48145466, 0.4578275, 0.40821073], image_std=[0.26862954, 0.26130258, 0.27577711],
                      patch_size=14, temporal_patch_size=1, merge_size=2)


def smart_resize(height, width, factor=28, min_pixels=384 * 384, max_pixels=1536 * 1536):
    """(height, width) rounded to multiples of `factor` with the pixel count kept in [min_pixels, max_pixels]."""
    if height < factor:
        width = round((width * factor) / height)
        height = factor
    if width < factor:
        height = round((height * factor) / width)
        width = factor
    if max(height, width) / min(height, width) > 200:
        raise ImageError(f"image aspect ratio {max(height, width) / min(height, width):.1f} exceeds 200 "
                         f"({width}x{height} after enlarging the short side)")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@dataclass
class ImageSettings:
    do_resize: bool
    resample: int
    min_pixels: int
    max_pixels: int
    do_rescale: bool
    rescale_factor: float
    do_normalize: bool
    image_mean: list
    image_std: list
    patch_size: int
    temporal_patch_size: int
    merge_size: int

    @classmethod
    def from_dict(cls, raw):
        """Accept transformers' `size: {shortest_edge, longest_edge}` and the hub's top-level min/max_pixels
        (which win, as in the reference __init__)."""
        values = {k: raw.get(k, v) for k, v in IMAGE_DEFAULTS.items()}
        size = dict(values.pop("size") or {})
        if raw.get("min_pixels") is not None:
            size["shortest_edge"] = raw["min_pixels"]
        if raw.get("max_pixels") is not None:
            size["longest_edge"] = raw["max_pixels"]
        if not size.get("shortest_edge") or not size.get("longest_edge"):
            raise CheckpointError(f"image processor size needs shortest_edge and longest_edge, got {size}")
        return cls(min_pixels=int(size["shortest_edge"]), max_pixels=int(size["longest_edge"]), **values)


def read_image_settings(model_dir):
    """From processor_config.json["image_processor"] if present (transformers' priority), else
    preprocessor_config.json."""
    nested = os.path.join(model_dir, "processor_config.json")
    if os.path.isfile(nested) and isinstance(read_json(nested).get("image_processor"), dict):
        return ImageSettings.from_dict(read_json(nested)["image_processor"])
    flat = os.path.join(model_dir, "preprocessor_config.json")
    if not os.path.isfile(flat):
        raise CheckpointError(f"no preprocessor_config.json (or processor_config.json) in {model_dir}")
    return ImageSettings.from_dict(read_json(flat))


def patchify(pixels, patch, temporal_patch):
    """[C, H, W] float32 -> [gh*gw, C*t, p, p] in raster order (the temporal copies broadcast), gh, gw."""
    channels, height, width = pixels.shape
    gh, gw = height // patch, width // patch
    patches = pixels.reshape(channels, gh, patch, gw, patch).transpose(1, 3, 0, 2, 4)  # -> [gh, gw, C, p, p]
    patches = np.broadcast_to(patches[:, :, :, None], (gh, gw, channels, temporal_patch, patch, patch))
    return patches.reshape(gh * gw, channels * temporal_patch, patch, patch), gh, gw


class PaddleOCRVLProcessor:
    """Images + prompt -> model inputs (NumPy) for PaddleOCR-VL."""

    def __init__(self, tokenizer, chat_template, settings, image_token_id):
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.settings = settings
        self.image_token_id = int(image_token_id)
        self.image_token = tokenizer.id_to_token(self.image_token_id)
        if self.image_token is None:
            raise CheckpointError(f"image_token_id {image_token_id} is not a token of the tokenizer")

    @classmethod
    def from_pretrained(cls, model_dir, cfg):
        """Tokenizer, chat template and image settings of `model_dir`, checked against `cfg` (PaddleOCRVLConfig)."""
        settings = read_image_settings(model_dir)
        if settings.patch_size != cfg.vision.patch_size or settings.merge_size != cfg.vision.spatial_merge_size:
            raise CheckpointError(f"preprocessor patch_size/merge_size {settings.patch_size}/{settings.merge_size} "
                                  f"differ from the vision config's {cfg.vision.patch_size}/"
                                  f"{cfg.vision.spatial_merge_size}")
        return cls(Tokenizer.from_dir(model_dir), load_chat_template(model_dir), settings, cfg.image_token_id)

    def preprocess_image(self, img):
        """One PIL image -> (patches [n, 3*t, p, p] float32, grid (1, gh, gw)).

        Always converted to RGB (every released preprocessor config sets do_convert_rgb); 16-bit and float modes
        are clipped to 0..255 by PIL exactly as in the reference.
        """
        s = self.settings
        rgb = to_rgb(img)
        if rgb.width == 0 or rgb.height == 0:
            raise ImageError(f"image has zero size ({rgb.width}x{rgb.height})")
        if s.do_resize:
            height, width = smart_resize(rgb.height, rgb.width, factor=s.patch_size * s.merge_size,
                                         min_pixels=s.min_pixels, max_pixels=s.max_pixels)
            rgb = rgb.resize((width, height), resample=Image.Resampling(s.resample))
        elif rgb.height % s.patch_size or rgb.width % s.patch_size:
            raise ImageError(f"{rgb.width}x{rgb.height} image is not a multiple of patch size {s.patch_size} "
                             "and the preprocessor does not resize")
        pixels = to_chw_uint8(rgb)
        if s.do_rescale:
            pixels = rescale(pixels, s.rescale_factor)
        if s.do_normalize:
            pixels = normalize(pixels, s.image_mean, s.image_std)
        patches, gh, gw = patchify(pixels.astype(np.float32), s.patch_size, s.temporal_patch_size)
        return patches, (1, gh, gw)

    def render_prompt(self, prompt, num_images):
        """The chat-template text for one user turn with `num_images` images before the prompt."""
        content = [{"type": "image"}] * num_images + [{"type": "text", "text": prompt}]
        return render_chat(self.chat_template, [{"role": "user", "content": content}],
                           add_generation_prompt=True, **self.tokenizer.special_tokens)

    def __call__(self, images, prompt):
        """Model inputs for `images` (list of PIL images) and a prompt such as TASK_PROMPTS["ocr"]."""
        images = [images] if isinstance(images, Image.Image) else list(images)
        processed = [self.preprocess_image(img) for img in images]
        grids = np.array([g for _, g in processed], dtype=np.int64).reshape(-1, 3)
        patch = self.settings.patch_size
        pixel_values = (np.concatenate([p for p, _ in processed]) if processed else
                        np.zeros((0, 3 * self.settings.temporal_patch_size, patch, patch), np.float32))
        text = self.render_prompt(prompt, len(images))
        parts = text.split(self.image_token)
        if len(parts) - 1 != len(images):
            raise ValueError(f"the chat template produced {len(parts) - 1} {self.image_token} placeholder(s) "
                             f"for {len(images)} image(s)")
        counts = [int(g.prod()) // self.settings.merge_size ** 2 for g in grids]
        expanded = parts[0] + "".join(self.image_token * n + rest for n, rest in zip(counts, parts[1:]))
        # transformers' apply_chat_template skips BOS/EOS when the rendered prompt already starts with BOS
        bos = self.tokenizer.special_tokens.get("bos_token")
        input_ids = np.array(self.tokenizer.encode(expanded, add_special_tokens=not (bos and text.startswith(bos))),
                             dtype=np.int64)
        token_types = (input_ids == self.image_token_id).astype(np.int64)
        if int(token_types.sum()) != sum(counts):
            raise ValueError(f"tokenised prompt has {int(token_types.sum())} image tokens, expected {sum(counts)}")
        position_ids, rope_delta = mrope_positions(token_types, grids, self.settings.merge_size)
        return {"input_ids": input_ids, "pixel_values": pixel_values, "image_grid_thw": grids,
                "position_ids": position_ids, "rope_delta": rope_delta, "mm_token_type_ids": token_types,
                "text": text}

    def decode(self, ids, skip_special_tokens=True):
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
