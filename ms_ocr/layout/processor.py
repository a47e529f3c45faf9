"""Preprocessing of the PP-DocLayout image processors (transformers' PPDocLayoutV2/V3/V4ImageProcessor, torchvision
backend): a bicubic resize without antialiasing to the checkpoint's size (800x800), then rescale and normalise.

V2 and V3 resize the uint8 image with torchvision's uint8 kernel and fuse rescale+normalise into one division; V4
resizes in float, rounds and clamps back to uint8, then multiplies by the rescale factor and normalises."""

import os
from dataclasses import dataclass

import numpy as np

from ms_ocr.config_utils import CheckpointError, read_json
from ms_ocr.processing.image import to_rgb
from ms_ocr.processing.resample import resize_bicubic_float, resize_bicubic_uint8

BICUBIC = 3  # PIL's resample id; the only resize the reference classes use
PIXEL_PATHS = ("uint8", "float")  # V2/V3's resize and scaling, V4's


@dataclass
class LayoutPreprocessConfig:
    height: int = 800
    width: int = 800
    do_resize: bool = True
    do_rescale: bool = True
    rescale_factor: float = 1 / 255
    do_normalize: bool = True
    image_mean: tuple = (0.0, 0.0, 0.0)
    image_std: tuple = (1.0, 1.0, 1.0)
    pixel_path: str = "uint8"

    @classmethod
    def from_dict(cls, raw, pixel_path="uint8"):
        """The hub's preprocessor_config.json; the reference class's defaults for omitted fields."""
        if pixel_path not in PIXEL_PATHS:
            raise ValueError(f"unknown pixel path {pixel_path!r}")
        out = cls(pixel_path=pixel_path)
        size = raw.get("size") or {}
        if size and not ("height" in size and "width" in size):
            raise CheckpointError(f"preprocessor_config.json: size {size} needs height and width (the layout model "
                                  "resizes to a fixed size)")
        if size:
            out.height, out.width = int(size["height"]), int(size["width"])
        if raw.get("resample", BICUBIC) != BICUBIC:
            raise CheckpointError(f"preprocessor_config.json: resample {raw['resample']} is not supported (bicubic, 3)")
        for name in ("do_resize", "do_rescale", "rescale_factor", "do_normalize"):
            if raw.get(name) is not None:
                setattr(out, name, type(getattr(out, name))(raw[name]))
        for name in ("image_mean", "image_std"):
            if raw.get(name) is not None:
                value = raw[name]
                values = value if isinstance(value, (list, tuple)) else [value] * 3
                setattr(out, name, tuple(float(v) for v in values))
        return out

    @classmethod
    def from_dir(cls, model_dir, pixel_path="uint8"):
        path = os.path.join(model_dir, "preprocessor_config.json")
        return cls.from_dict(read_json(path) if os.path.isfile(path) else {}, pixel_path)


def preprocess(image, pcfg):
    """PIL image -> pixel_values [1, 3, H, W] float32 (RGB)."""
    pixels = np.asarray(to_rgb(image), np.uint8)
    mean, std = np.asarray(pcfg.image_mean, np.float32), np.asarray(pcfg.image_std, np.float32)
    if pcfg.pixel_path == "float":
        if pcfg.do_resize:  # float bicubic, rounded and saturated back to uint8 as the reference does
            pixels = np.clip(np.round(resize_bicubic_float(pixels, pcfg.height, pcfg.width)), 0, 255).astype(np.uint8)
        x = pixels.astype(np.float32)
        if pcfg.do_rescale:
            x = x * np.float32(pcfg.rescale_factor)
        if pcfg.do_normalize:
            x = (x - mean) / std
        return np.ascontiguousarray(x.transpose(2, 0, 1)[None])
    if pcfg.do_resize:
        pixels = resize_bicubic_uint8(pixels, pcfg.height, pcfg.width)
    x = pixels.astype(np.float32)
    if pcfg.do_rescale and pcfg.do_normalize:
        # the reference fuses both into one normalise: mean / factor and std / factor, then (x - mean) / std
        inv = np.float32(1.0 / pcfg.rescale_factor)
        x = (x - mean * inv) / (std * inv)
    elif pcfg.do_normalize:
        x = (x - mean) / std
    elif pcfg.do_rescale:
        x = x * np.float32(pcfg.rescale_factor)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])
