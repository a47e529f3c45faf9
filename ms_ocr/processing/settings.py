"""Image-processor settings as checkpoints ship them, and Qwen2-VL-style smart_resize."""

import math
import os
from dataclasses import dataclass

from ms_ocr.config_utils import CheckpointError, read_json
from ms_ocr.processing.image import ImageError


def smart_resize(height, width, factor, min_pixels, max_pixels, enlarge_thin=False):
    """(height, width) rounded to multiples of `factor` with the pixel count kept in [min_pixels, max_pixels].

    enlarge_thin (PaddleOCR-VL): a side shorter than `factor` is first scaled up to it, keeping the aspect
    ratio; HunyuanOCR's reference has no such step.
    """
    image_size = f"{width}x{height}"  # the image's own size, before enlarge_thin
    if enlarge_thin:
        if height < factor:
            width = round((width * factor) / height)
            height = factor
        if width < factor:
            height = round((height * factor) / width)
            width = factor
    if max(height, width) / min(height, width) > 200:
        raise ImageError(f"image aspect ratio {max(height, width) / min(height, width):.1f} exceeds 200 (the "
                         f"image is {image_size} pixels, width x height)")
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
    def from_dict(cls, raw, defaults):
        """Accept transformers' `size: {shortest_edge, longest_edge}` and the hub's top-level min/max_pixels
        (which win, as in the reference processors' __init__). `defaults`: the reference class's values."""
        values = {k: raw.get(k, v) for k, v in defaults.items()}
        size = dict(values.pop("size") or {})
        if raw.get("min_pixels") is not None:
            size["shortest_edge"] = raw["min_pixels"]
        if raw.get("max_pixels") is not None:
            size["longest_edge"] = raw["max_pixels"]
        if not size.get("shortest_edge") or not size.get("longest_edge"):
            raise CheckpointError(f"image processor size needs shortest_edge and longest_edge, got {size}")
        return cls(min_pixels=int(size["shortest_edge"]), max_pixels=int(size["longest_edge"]), **values)


def read_image_processor_dict(model_dir, required=True):
    """The image processor's settings: processor_config.json["image_processor"] if present (transformers'
    priority), else preprocessor_config.json; None (or an error when `required`) when neither exists."""
    nested = os.path.join(model_dir, "processor_config.json")
    if os.path.isfile(nested) and isinstance(read_json(nested).get("image_processor"), dict):
        return read_json(nested)["image_processor"]
    flat = os.path.join(model_dir, "preprocessor_config.json")
    if os.path.isfile(flat):
        return read_json(flat)
    if required:
        raise CheckpointError(f"no preprocessor_config.json (or processor_config.json) in {model_dir}")
    return None


def read_image_settings(model_dir, defaults):
    return ImageSettings.from_dict(read_image_processor_dict(model_dir), defaults)
