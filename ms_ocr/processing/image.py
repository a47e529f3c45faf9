"""Image loading and pixel arithmetic as transformers' PIL image processors do it (image_transforms.py).

`to_rgb` is `convert_to_rgb` for PIL input (except 16-bit grayscale, scaled to 8 bits instead of clipped);
`rescale` / `normalize` repeat its float64 -> float32 rescale and float32 normalisation so pixel values come out
bit-identical.
"""

import os
import warnings

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
# The widest width:height (or height:width) an input may have: the Qwen2-VL-style processors (PaddleOCR-VL,
# HunyuanOCR) refuse more in smart_resize, and DeepSeek-OCR's fixed views would shrink such a strip to a few
# pixels across. Checked from the header, before decoding (a 64,000,000x1 PNG is slow and large to decode).
MAX_ASPECT_RATIO = 200


class ImageSize:
    """What a request keeps of an image once its model inputs are made: its size (the models' post-processing
    scales boxes by it). A line reader's lines are kept so, not as pixels: a page without ink is one "line" of
    the page's full size (192 MB at 64 Mpx), held by every request waiting in a server's queue."""

    __slots__ = ("width", "height")

    def __init__(self, width, height):
        self.width, self.height = int(width), int(height)

    @property
    def size(self):
        return self.width, self.height

    def __repr__(self):
        return f"ImageSize({self.width}x{self.height})"


def check_aspect(width, height, name="the image"):
    """ImageError when width:height is past MAX_ASPECT_RATIO (either way)."""
    if width and height and max(width, height) / min(width, height) > MAX_ASPECT_RATIO:
        raise ImageError(f"{name}: aspect ratio {max(width, height) / min(width, height):.1f} exceeds "
                         f"{MAX_ASPECT_RATIO} (the image is {width}x{height} pixels, width x height)")


class ImageError(ValueError):
    """An input image that cannot be used (missing, unreadable, truncated, empty or badly shaped)."""


def max_image_pixels():
    """The most pixels an input may have: the size at which Pillow refuses to open an image file
    (DecompressionBombError, twice Image.MAX_IMAGE_PIXELS: 178,956,970 by default); PDF pages are rendered
    within it too. None when Image.MAX_IMAGE_PIXELS is None (no limit)."""
    return None if Image.MAX_IMAGE_PIXELS is None else 2 * Image.MAX_IMAGE_PIXELS


def to_8bit(img):
    """A 16-bit grayscale image (modes I;16*, and I holding values above 255) scaled to mode L by v * 255 / 65535,
    rounded; other images as they are. transformers' convert_to_rgb (PIL's convert) clips such values at 255, so a
    16-bit scan comes out almost white; 8-bit images are unchanged."""
    if img.mode not in SIXTEEN_BIT_MODES and img.mode != "I":
        return img
    values = np.asarray(img)
    if img.mode == "I" and (values.size == 0 or int(values.max()) <= 255):
        return img  # 8-bit data in a 32-bit mode: PIL's own conversion is exact
    wide = np.clip(values.astype(np.int64), 0, 65535)
    gray = Image.fromarray(((wide * 255 + 32767) // 65535).astype(np.uint8), "L")
    transparency = img.info.get("transparency")
    if isinstance(transparency, int):  # a tRNS gray value: those pixels become transparent
        alpha = Image.fromarray(np.where(wide == transparency, 0, 255).astype(np.uint8), "L")
        gray = Image.merge("LA", (gray, alpha))
    return gray


def to_rgb(img):
    """RGB copy of a PIL image; any transparency is composited onto white (transformers' convert_to_rgb);
    16-bit grayscale is scaled to 8 bits first (to_8bit)."""
    img = to_8bit(img)
    if "A" in img.getbands() or img.info.get("transparency") is not None:
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def load_image(path, exif_transpose=True):
    """Open an image file (png, jpg, webp, bmp, tiff; first frame of multi-page files) as an RGB PIL image.

    The whole file is decoded here so truncated files fail now, with the path in the message: any failure of
    the decoder is an ImageError of one line (PIL's warnings about odd metadata are not shown). EXIF orientation
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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Corrupt EXIF data", "Possibly corrupt TIFF tags"
            with Image.open(path) as img:
                if img.width == 0 or img.height == 0:
                    raise ImageError(f"{path} has zero size ({img.width}x{img.height})")
                check_aspect(img.width, img.height, path)  # from the header: before a long decode
                img.seek(0)
                img.load()
                if img.width == 0 or img.height == 0:
                    raise ImageError(f"{path} has zero size ({img.width}x{img.height})")
                if exif_transpose:
                    img = ImageOps.exif_transpose(img)
                return to_rgb(img)
    except ImageError:
        raise
    except UnidentifiedImageError:
        raise ImageError(f"{path} is not a readable image (unknown format or invalid header)") from None
    except Image.DecompressionBombError as e:
        raise ImageError(f"{path} is too large to decode safely ({_detail(e)})") from None
    except MemoryError:
        raise ImageError(f"{path} is too large to decode in the memory available") from None
    except Exception as e:  # noqa: BLE001 - a corrupt file can fail anywhere in a decoder plugin
        raise ImageError(f"{path} is truncated or corrupt ({_detail(e)})") from None


def _detail(e):
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text and not isinstance(e, (OSError, SyntaxError, ValueError, EOFError)) \
        else text or type(e).__name__


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
