"""Images of a chat request: `data:` base64 URLs, and only where the server allows them http(s) URLs
(--allowed-media-domains, serve/fetch.py) and `file://` URLs (--allowed-local-media-path), decoded with the same
checks as files given to `infer`, within size limits."""

import base64
import binascii
import io
import os
import urllib.parse
import urllib.request
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from ms_ocr.processing.image import to_rgb
from ms_ocr.serve.fetch import FetchError, fetch
from ms_ocr.serve.protocol import ApiError


@dataclass
class MediaLimits:
    max_bytes: int = 32 * 2 ** 20          # encoded image size
    max_pixels: int = 64 * 10 ** 6         # decoded width * height
    allowed_local_path: str = None         # file:// URLs must resolve under this folder (None: refused)
    allowed_domains: tuple = ()            # host names http(s) URLs may name (empty: remote images refused)
    allow_private: bool = False            # let allowed hosts resolve to loopback/private/link-local addresses
    fetch_timeout: float = 10.0            # seconds for a whole fetch: connect, redirects, every byte
    max_request_bytes: int = 64 * 2 ** 20  # a request body (base64 images are 4/3 of their bytes)


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
            return fetch(url, limits)
        except FetchError as e:
            raise _bad(str(e)) from None
    if scheme == "file":
        if not limits.allowed_local_path:
            raise _bad("file:// image URLs need the server's --allowed-local-media-path")
        path = os.path.realpath(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
        root = os.path.realpath(limits.allowed_local_path)
        if os.path.commonpath([path, root]) != root:
            raise _bad("the file:// URL is outside --allowed-local-media-path")
        if not os.path.isfile(path):
            raise _bad("image file not found under --allowed-local-media-path")
        if os.path.getsize(path) > limits.max_bytes:
            raise _bad(f"image file is larger than {limits.max_bytes} bytes")
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


def is_remote(url):
    return urllib.parse.urlsplit(url).scheme.lower() in ("http", "https")


def load_images(urls, limits):
    return [decode_image(read_url(url, limits), limits) for url in urls]
