"""Image loading and pixel arithmetic as transformers' PIL image processors do it (image_transforms.py).

`to_rgb` is `convert_to_rgb` for PIL input; `rescale` / `normalize` repeat its float64 -> float32 rescale and
float32 normalisation so pixel values come out bit-identical.
"""

import os

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError


class ImageError(ValueError):
    """An input image that cannot be used (missing, unreadable, truncated, empty or badly shaped)."""


def to_rgb(img):
    """RGB copy of a PIL image; any transparency is composited onto white (transformers' convert_to_rgb)."""
    if "A" in img.getbands() or img.info.get("transparency") is not None:
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def load_image(path, exif_transpose=True):
    """Open an image file (png, jpg, webp, bmp, tiff; first frame of multi-page files) as an RGB PIL image.

    The whole file is decoded here so truncated files fail now, with the path in the message. EXIF orientation
    is applied like transformers' load_image (and OpenCV's imread) do for files; pass exif_transpose=False to
    keep the stored pixel layout.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ImageError(f"image file not found: {path}")
    if os.path.isdir(path):
        raise ImageError(f"{path} is a directory, not an image file")
    if os.path.getsize(path) == 0:
        raise ImageError(f"{path} is empty (0 bytes)")
    try:
        with Image.open(path) as img:
            img.seek(0)
            img.load()
            if img.width == 0 or img.height == 0:
                raise ImageError(f"{path} has zero size ({img.width}x{img.height})")
            if exif_transpose:
                img = ImageOps.exif_transpose(img)
            return to_rgb(img)
    except UnidentifiedImageError:
        raise ImageError(f"{path} is not a readable image (unknown format or invalid header)") from None
    except Image.DecompressionBombError as e:
        raise ImageError(f"{path} is too large to decode safely ({e})") from None
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        if isinstance(e, ImageError):
            raise
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ImageError(f"{path} is truncated or corrupt ({detail})") from None


def to_chw_uint8(img):
    """[3, H, W] uint8 array of an RGB PIL image."""
    if img.mode != "RGB":
        raise ImageError(f"expected an RGB image, got mode {img.mode}")
    return np.asarray(img, dtype=np.uint8).transpose(2, 0, 1)


def rescale(pixels, factor):
    """pixels * factor computed in float64 and stored as float32 (image_transforms.rescale)."""
    return (pixels.astype(np.float64) * factor).astype(np.float32)


def normalize(pixels, mean, std):
    """(pixels - mean) / std per channel of a [C, H, W] array, in float32 (image_transforms.normalize)."""
    if not np.issubdtype(pixels.dtype, np.floating):
        pixels = pixels.astype(np.float32)
    channels = pixels.shape[0]
    mean = np.array(mean if np.ndim(mean) else [mean] * channels, dtype=pixels.dtype)
    std = np.array(std if np.ndim(std) else [std] * channels, dtype=pixels.dtype)
    if mean.shape != (channels,) or std.shape != (channels,):
        raise ValueError(f"mean/std need {channels} values, got {mean.tolist()} / {std.tolist()}")
    return (pixels - mean[:, None, None]) / std[:, None, None]
