"""PDF pages for the browser page: a PDF sent in a request body, its page count and one page rasterised to PNG with
pypdfium2, bounded as the batch runner's pages are (batch/inputs.py: the DPI lowered to fit PDF_PAGE_PIXELS) and by
the server's own image limits, so the page it returns is one the server then accepts."""

import contextlib
import io
import math
import threading

from ms_ocr.batch.inputs import PDF_PAGE_PIXELS, capped_scale
from ms_ocr.serve.protocol import ApiError

DEFAULT_DPI = 200  # the batch runner's --dpi default
DPI_RANGE = (10, 600)  # the batch runner's accepted --dpi range


def _bad(message):
    return ApiError(400, message, param="pdf")


def _detail(e):
    return " ".join(str(e).split()).rstrip(".") or type(e).__name__


class PdfPages:
    """Page counts and page renders of PDFs given as bytes. pdfium is not thread-safe: every call into it holds
    one lock (the renders run on the server's decode threads, two at most)."""

    def __init__(self, limits):
        self.limits = limits
        self.lock = threading.Lock()

    def pixel_limit(self):
        """The most pixels a rendered page may have: the batch runner's bound, or the server's image limits if
        lower (a page above --max-image-pixels or --max-request-pixels would be refused when sent back)."""
        return min(PDF_PAGE_PIXELS, self.limits.max_pixels, self.limits.max_request_pixels)

    def _open(self, data):
        try:
            import pypdfium2
        except ImportError:
            raise ApiError(501, "PDF pages need pypdfium2 on the server (pip install pypdfium2)") from None
        if not data:
            raise _bad("the PDF is empty (0 bytes)")
        try:
            return pypdfium2.PdfDocument(data)
        except Exception as e:  # noqa: BLE001 - pdfium raises its own error types
            raise _bad(f"the file is not a readable PDF ({_detail(e)})") from None

    def count(self, data):
        """The number of pages of the PDF `data` (bytes)."""
        with self.lock:
            doc = self._open(data)
            try:
                return len(doc)
            finally:
                doc.close()

    def render_png(self, data, page, dpi=DEFAULT_DPI):
        """(PNG bytes, width, height, pages) of page `page` (1-based) of the PDF `data` at `dpi`, lowered to fit
        pixel_limit(); its pixels are held from the server's decode budget while it is rendered and encoded."""
        if not DPI_RANGE[0] <= dpi <= DPI_RANGE[1]:
            raise ApiError(400, f"dpi must be in {DPI_RANGE[0]}..{DPI_RANGE[1]}", param="dpi")
        with self.lock:
            doc = self._open(data)
            try:
                pages = len(doc)
                if not 1 <= page <= pages:
                    raise ApiError(400, f"the PDF has no page {page} (it has {pages})", param="page")
                width_pt, height_pt = doc[page - 1].get_size()
            finally:
                doc.close()
        if width_pt <= 0 or height_pt <= 0:
            raise _bad(f"page {page} of the PDF is empty")
        scale = capped_scale(width_pt, height_pt, dpi, self.pixel_limit())
        with self._budget(math.ceil(width_pt * scale) * math.ceil(height_pt * scale)):
            with self.lock:
                doc = self._open(data)
                try:
                    img = doc[page - 1].render(scale=scale).to_pil()
                except Exception as e:  # noqa: BLE001
                    raise _bad(f"page {page} of the PDF cannot be rendered ({_detail(e)})") from None
                finally:
                    doc.close()
            buf = io.BytesIO()
            img.convert("RGB").save(buf, format="PNG")
            return buf.getvalue(), img.width, img.height, pages

    @contextlib.contextmanager
    def _budget(self, pixels):
        budget = self.limits.budget
        if budget is not None:
            budget.take(pixels)
        try:
            yield
        finally:
            if budget is not None:
                budget.give(pixels)
