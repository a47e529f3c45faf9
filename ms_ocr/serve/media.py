"""Images of a chat request: `data:` base64 URLs, and only where the server allows them http(s) URLs
(--allowed-media-domains, serve/fetch.py) and `file://` URLs (--allowed-local-media-path), decoded with the same
checks as files given to `infer`, within size limits.

Memory: an image's cost is its decoded pixels (a 79 KB white PNG of 8000x8000 decodes to 192 MB and ~270 MB with
its resize), not its bytes. So every image of a request is measured from its header first (count, each one's
pixels and aspect ratio, the request's total) and refused with a 400 naming the limit before anything is decoded;
then the request takes its pixels from one DecodeBudget the whole server shares, held while it decodes and
prepares its images, so concurrent requests decode at most that many pixels at once (the others wait their turn,
or get a 503 past a deadline)."""

import base64
import binascii
import contextlib
import io
import os
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from ms_ocr.processing.image import MAX_ASPECT_RATIO, to_rgb
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
    max_images: int = 8                    # images in one request
    max_request_pixels: int = 64 * 10 ** 6  # decoded width * height of a request's images together
    budget: object = None                  # the server's DecodeBudget (None: no sharing, e.g. unit tests)


class DecodeBudget:
    """Decoded pixels the whole server may hold at once while requests decode and prepare their images (threads of
    the event loop's executor take and return them). A request asking more than the budget is a configuration
    error caught at start-up (max_request_pixels <= budget); a request that cannot get its share within `wait`
    seconds is answered 503."""

    def __init__(self, pixels, wait=30.0):
        self.capacity, self.free, self.wait = pixels, pixels, wait
        self.cond = threading.Condition()

    def take(self, pixels):
        deadline = time.monotonic() + self.wait
        with self.cond:
            while self.free < pixels:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ApiError(503, "the server is busy decoding other requests' images; retry later")
                self.cond.wait(left)
            self.free -= pixels

    def give(self, pixels):
        with self.cond:
            self.free += pixels
            self.cond.notify_all()


def _bad(message):
    return ApiError(400, message, param="messages")


def read_url(url, limits):
    """The encoded bytes an image URL names (blocking: http(s) URLs are fetched here)."""
    if url[:5].lower() == "data:":  # URL schemes are case-insensitive (RFC 3986 3.1)
        head, sep, payload = url.partition(",")
        if not sep or not head.lower().endswith(";base64"):
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
        parts = urllib.parse.urlsplit(url)
        if parts.netloc.lower() not in ("", "localhost"):  # file://host/path names another machine's file
            raise _bad(f"file:// URLs may not name a host ({parts.netloc!r}): use file:///path")
        local = urllib.request.url2pathname(parts.path)
        if "\0" in local:
            raise _bad("the file:// URL holds a NUL character")
        path = os.path.realpath(local)
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


def image_size(data, limits):
    """(width, height) from an encoded image's header, without decoding its pixels: checked against the pixel
    limit and the aspect-ratio limit of every input (processing.image.MAX_ASPECT_RATIO), so an image that would
    fail after a long decode (a 64,000,000x1 PNG) fails at once."""
    if not data:
        raise _bad("image is empty (0 bytes)")
    with _readable(limits), Image.open(io.BytesIO(data)) as img:
        width, height = img.size
    if width * height > limits.max_pixels:
        raise _bad(f"image of {width}x{height} pixels exceeds the server's limit of {limits.max_pixels} pixels "
                   "(--max-image-pixels)")
    if width == 0 or height == 0:
        raise _bad(f"image has zero size ({width}x{height})")
    if max(width, height) / min(width, height) > MAX_ASPECT_RATIO:
        raise _bad(f"image aspect ratio {max(width, height) / min(width, height):.1f} exceeds {MAX_ASPECT_RATIO} "
                   f"(the image is {width}x{height} pixels, width x height)")
    return width, height


def decode_image(data, limits):
    """Encoded bytes -> RGB PIL image (first frame, EXIF orientation applied, as infer loads files)."""
    image_size(data, limits)
    with _readable(limits), Image.open(io.BytesIO(data)) as img:
        img.seek(0)
        img.load()
        return to_rgb(ImageOps.exif_transpose(img))


@contextlib.contextmanager
def _readable(limits):
    """PIL's failures to open or decode an image, as the 400 a client can act on."""
    try:
        yield
    except UnidentifiedImageError:
        raise _bad("image is not readable (unknown format or invalid header)") from None
    except Image.DecompressionBombError:
        raise _bad(f"image exceeds the server's limit of {limits.max_pixels} pixels") from None
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise _bad(f"image is truncated or corrupt ({detail})") from None


def is_remote(url):
    return urllib.parse.urlsplit(url).scheme.lower() in ("http", "https")


def read_images(urls, limits):
    """The encoded bytes of a request's images and their total decoded pixels, every limit checked from the
    headers (count, each image's pixels and aspect ratio, the request's total) before anything is decoded."""
    if len(urls) > limits.max_images:
        raise _bad(f"the request has {len(urls)} images; this server takes at most {limits.max_images} per request "
                   "(--max-images-per-request)")
    encoded, total = [], 0
    for url in urls:
        data = read_url(url, limits)
        width, height = image_size(data, limits)
        total += width * height
        if total > limits.max_request_pixels:
            raise _bad(f"the request's images have more than {limits.max_request_pixels} pixels together "
                       "(--max-request-pixels)")
        encoded.append(data)
    return encoded, total


class Decoded:
    """A request's images decoded within the server's DecodeBudget: `with Decoded(encoded, pixels, limits) as
    images:` holds the request's pixels of the budget until the block (decoding and preparing them) ends."""

    def __init__(self, encoded, pixels, limits):
        self.encoded, self.pixels, self.limits = encoded, pixels, limits

    def __enter__(self):
        budget = self.limits.budget
        if budget is not None:
            budget.take(self.pixels)
        try:
            return [decode_image(data, self.limits) for data in self.encoded]
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc):
        if self.limits.budget is not None and self.pixels is not None:
            self.limits.budget.give(self.pixels)
            self.pixels = None


def load_images(urls, limits):
    """Decoded images of a request (no budget held: tests and tools)."""
    encoded, _ = read_images(urls, limits)
    return [decode_image(data, limits) for data in encoded]
