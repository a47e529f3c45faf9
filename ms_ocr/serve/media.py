"""Images of a chat request: `data:` base64 URLs, http(s) URLs and (only under --allowed-local-media-path)
`file://` URLs, decoded with the same checks as files given to `infer`, within size limits."""

import base64
import binascii
import io
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from ms_ocr.processing.image import to_rgb
from ms_ocr.serve.protocol import ApiError


@dataclass
class MediaLimits:
    max_bytes: int = 32 * 2 ** 20          # encoded image size
    max_pixels: int = 64 * 10 ** 6         # decoded width * height
    allowed_local_path: str = None         # file:// URLs must resolve under this folder (None: refused)
    fetch_timeout: float = 30.0


def _bad(message):
    return ApiError(400, message, param="messages")


def read_url(url, limits):
    """The encoded bytes an image URL names (blocking: http(s) URLs are fetched here)."""
    if url.startswith("data:"):
        head, sep, payload = url.partition(",")
        if not sep or not head.endswith(";base64"):
            raise _bad("image data URL must be data:<mime>;base64,<data>")
        if len(payload) * 3 // 4 > limits.max_bytes:
            raise _bad(f"image is larger than {limits.max_bytes} bytes")
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise _bad("image data URL is not valid base64") from None
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        try:
            with urllib.request.urlopen(url, timeout=limits.fetch_timeout) as resp:
                data = resp.read(limits.max_bytes + 1)
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise _bad(f"could not fetch image {url}: {getattr(e, 'reason', e)}") from None
        if len(data) > limits.max_bytes:
            raise _bad(f"image at {url} is larger than {limits.max_bytes} bytes")
        return data
    if scheme == "file":
        if not limits.allowed_local_path:
            raise _bad("file:// image URLs need the server's --allowed-local-media-path")
        path = os.path.realpath(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
        root = os.path.realpath(limits.allowed_local_path)
        if os.path.commonpath([path, root]) != root:
            raise _bad(f"{path} is outside --allowed-local-media-path")
        if not os.path.isfile(path):
            raise _bad(f"image file not found: {path}")
        if os.path.getsize(path) > limits.max_bytes:
            raise _bad(f"image {path} is larger than {limits.max_bytes} bytes")
        with open(path, "rb") as f:
            return f.read()
    raise _bad(f"unsupported image URL scheme {scheme or url[:16]!r} (data:, http(s):, file:)")


def decode_image(data, limits):
    """Encoded bytes -> RGB PIL image (first frame, EXIF orientation applied, as infer loads files)."""
    if not data:
        raise _bad("image is empty (0 bytes)")
    try:
        with Image.open(io.BytesIO(data)) as img:
            if img.width * img.height > limits.max_pixels:
                raise _bad(f"image of {img.width}x{img.height} pixels exceeds the server's limit of "
                           f"{limits.max_pixels} pixels")
            if img.width == 0 or img.height == 0:
                raise _bad(f"image has zero size ({img.width}x{img.height})")
            img.seek(0)
            img.load()
            return to_rgb(ImageOps.exif_transpose(img))
    except ApiError:
        raise
    except UnidentifiedImageError:
        raise _bad("image is not readable (unknown format or invalid header)") from None
    except Image.DecompressionBombError:
        raise _bad(f"image exceeds the server's limit of {limits.max_pixels} pixels") from None
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise _bad(f"image is truncated or corrupt ({detail})") from None


def load_images(urls, limits):
    return [decode_image(read_url(url, limits), limits) for url in urls]
