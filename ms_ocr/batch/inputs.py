"""Work items of an offline batch job: image files, PDF pages and JSONL manifest lines, in a fixed order."""

import hashlib
import json
import math
import os
from dataclasses import dataclass

from ms_ocr.errors import UsageError
from ms_ocr.processing.image import ImageError, load_image, max_image_pixels, to_rgb

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")
# A rendered PDF page has at most this many pixels (its DPI lowered to fit): more than any model reads (their
# processors resize a page to at most ~17 Mpx), and a page in flight costs ~3 bytes a pixel plus pdfium's 4 while
# it renders (a poster-sized page at the full --dpi would hold gigabytes, once per page decoding at once).
PDF_PAGE_PIXELS = 36 * 10 ** 6


class InputError(UsageError):
    """A batch input that cannot be listed at all (missing path, unreadable manifest)."""


@dataclass(frozen=True)
class WorkItem:
    """One page to recognise. `key` is unique and stable across runs: the file's resolved absolute path (symlinks
    and `.`/`..` resolved, so `scans/`, `./scans/` and `/home/u/scans/` name the same pages, and the same relative
    path typed in another folder names other pages), its PDF page and its task or prompt. `stamp` is the file's
    size and modification time: a page counts as done for a resumed run when both its key and its stamp match a
    finished record (a file replaced in place is read again)."""
    key: str
    source: str          # image or PDF path, resolved and absolute
    page: int = 0        # 1-based PDF page, 0 for image files
    task: str = None     # per-item task / prompt from a manifest (None: the job's)
    prompt: str = None
    stamp: str = None    # "size:mtime_ns" of the file when listed (None: it could not be read)

    @property
    def document(self):
        return self.source


def _suffix(task, prompt):
    if prompt is not None:
        return "@prompt-" + hashlib.sha1(prompt.encode("utf-8")).hexdigest()[:10]
    return f"@{task}" if task else ""


def _open_pdf(path):
    pdfium = _pdfium()
    try:
        return pdfium.PdfDocument(path)
    except Exception as e:  # noqa: BLE001 - pdfium raises its own error types
        raise ImageError(f"{path} is not a readable PDF ({_detail(e)})") from None


def _detail(e):
    return " ".join(str(e).split()).rstrip(".") or type(e).__name__


def pdf_page_count(path):
    doc = _open_pdf(path)
    try:
        return len(doc)
    finally:
        doc.close()


def capped_scale(width_pt, height_pt, dpi, limit):
    """The rendering scale (pixels per point) for `dpi`, lowered so the page has at most `limit` pixels (pdfium
    rounds sizes up: the bound holds for the rendered image)."""
    scale = dpi / 72.0
    if limit is None or math.ceil(width_pt * scale) * math.ceil(height_pt * scale) <= limit:
        return scale
    scale = math.sqrt(limit / (width_pt * height_pt))
    while math.ceil(width_pt * scale) * math.ceil(height_pt * scale) > limit:
        scale *= 0.999
    return scale


def render_pdf_page(path, page, dpi):
    """Page `page` (1-based) of a PDF rasterised at `dpi` as an RGB PIL image. A page that would exceed
    PDF_PAGE_PIXELS (or the pixel limit of image files, processing.image.max_image_pixels, if lower) is rendered
    at the DPI that fits; the DPI used is the image's info["dpi"] (x, y), below `dpi` exactly when it was
    lowered."""
    doc = _open_pdf(path)
    try:
        if not 1 <= page <= len(doc):
            raise ImageError(f"{path} has no page {page} (it has {len(doc)})")
        pdf_page = doc[page - 1]
        width_pt, height_pt = pdf_page.get_size()
        if width_pt <= 0 or height_pt <= 0:
            raise ImageError(f"{path} page {page} is empty")
        limit = max_image_pixels()
        scale = capped_scale(width_pt, height_pt, dpi, PDF_PAGE_PIXELS if limit is None else
                             min(limit, PDF_PAGE_PIXELS))
        img = pdf_page.render(scale=scale).to_pil()
    except ImageError:
        raise
    except Exception as e:  # noqa: BLE001
        raise ImageError(f"{path} page {page} cannot be rendered ({_detail(e)})") from None
    finally:
        doc.close()
    if img.width == 0 or img.height == 0:
        raise ImageError(f"{path} page {page} is empty")
    img = to_rgb(img)
    used = dpi if scale == dpi / 72.0 else math.floor(scale * 72000.0) / 1000.0
    img.info["dpi"] = (used, used)
    return img


def page_dpi(img):
    """The DPI a rendered PDF page (render_pdf_page) was rendered at (image files may carry their own)."""
    dpi = img.info.get("dpi")
    return dpi[0] if isinstance(dpi, tuple) and dpi else None


def _pdfium():
    try:
        import pypdfium2
    except ImportError:
        raise InputError("PDF input needs pypdfium2: pip install pypdfium2 (or pip install -e .[pdf])") from None
    return pypdfium2


def file_stamp(path):
    """"size:mtime_ns" of a file, or None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_size}:{st.st_mtime_ns}"


def _expand_file(path, task=None, prompt=None):
    """Items of one file: an image, or every page of a PDF (one item recording the error if it is unreadable)."""
    path = os.path.realpath(path)
    suffix, stamp = _suffix(task, prompt), file_stamp(path)
    if path.lower().endswith(".pdf"):
        try:
            pages = pdf_page_count(path)
        except ImageError:
            return [WorkItem(f"{path}#1{suffix}", path, 1, task, prompt, stamp)]  # fails again when loaded: recorded
        return [WorkItem(f"{path}#{p}{suffix}", path, p, task, prompt, stamp) for p in range(1, pages + 1)]
    return [WorkItem(f"{path}{suffix}", path, 0, task, prompt, stamp)]


def read_manifest(path):
    """JSONL lines {"image": path, "task" | "prompt": ...}; relative paths are relative to the manifest (wherever
    the command runs). The file
    is UTF-8 (JSON's encoding); a file name that is not valid UTF-8 is written with \\udcXX escapes, as
    results.jsonl records it."""
    base = os.path.dirname(os.path.abspath(path))
    items = []
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as e:
        raise InputError(f"cannot read manifest {path}: {e.strerror or e}") from None
    for n, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{path} line {n}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
                             "save the manifest as UTF-8 (a file name that is not UTF-8 can be written as "
                             "\\udcXX escapes per byte, as results.jsonl does)") from None
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path} line {n}: not JSON ({e.msg})") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("image"), str):
            raise InputError(f'{path} line {n}: expected {{"image": path, ...}}')
        if "task" in entry and "prompt" in entry:
            raise InputError(f"{path} line {n}: give either task or prompt, not both")
        for field in ("task", "prompt"):
            if field in entry and not isinstance(entry[field], str):
                raise InputError(f'{path} line {n}: "{field}" must be a string, not {json.dumps(entry[field])[:40]}')
        image = entry["image"]
        image = image if os.path.isabs(image) else os.path.join(base, image)
        items += _expand_file(image, entry.get("task"), entry.get("prompt"))
    if not items:
        raise InputError(f"manifest {path} lists no images")
    return items


def collect(paths):
    """All work items of the given folders (recursive: images and PDFs), PDFs, images and .jsonl manifests,
    in a deterministic order (sorted within folders; the same page named twice, under any spelling of its path,
    is one item, at its first occurrence). A folder without
    any image or PDF is an error (a wrong path is likelier than an intended no-op)."""
    items = []
    for path in paths:
        if os.path.isdir(path):
            found = []
            for root, dirs, files in os.walk(path):
                # hidden folders and files are not pages: .git/, macOS's ._name resource forks, editors' swap files
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                found += [os.path.join(root, f) for f in files
                          if not f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS + (".pdf",))]
            if not found:
                kinds = ", ".join(e.lstrip(".") for e in IMAGE_EXTENSIONS + (".pdf",))
                raise InputError(f"input folder {path} has no images or PDFs ({kinds}), in any subfolder")
            for f in sorted(found):
                items += _expand_file(f)
        elif path.lower().endswith(".jsonl"):
            items += read_manifest(path)
        elif os.path.exists(path):
            items += _expand_file(path)
        else:
            raise InputError(f"input not found: {path}")
    seen, unique = set(), []
    for item in items:
        if item.key not in seen:
            seen.add(item.key)
            unique.append(item)
    return unique


def shard(items, rank, world):
    """This rank's share of the items (round robin, so ranks get similar mixes of documents)."""
    if world < 1 or not 0 <= rank < world:
        raise InputError(f"rank {rank} is outside a world of {world}")
    return items[rank::world]


def load(item, dpi):
    """The RGB page image of an item."""
    return render_pdf_page(item.source, item.page, dpi) if item.page else load_image(item.source)
