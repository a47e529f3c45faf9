"""The endpoints the page uses besides /v1/chat/completions (ms_ocr/serve/page.py), over HTTP on the served tiny
PaddleOCR-VL of the error tests (tests/serve/conftest.py): the page and its files under the Content-Security-Policy,
the model's tasks from its ModelSpec, its post-processing of an answer (the boxes `infer --json` gives), PDF pages
counted and rendered within the server's pixel limits, and the API key over all of them."""

import io

import httpx
import pytest
from PIL import Image

from ms_ocr.models.paddleocr_vl import SPEC
from ms_ocr.models.paddleocr_vl.postprocess import parse_spotting
from ms_ocr.serve.media import MediaLimits
from ms_ocr.serve.page import CSP, static_files
from ms_ocr.serve.pdf_pages import PdfPages
from tests.serve.conftest import check_error

SPOTTING = "Total<|LOC_10|><|LOC_20|><|LOC_300|><|LOC_20|><|LOC_300|><|LOC_80|><|LOC_10|><|LOC_80|>"


def _pdf(*sizes):
    """A PDF of white pages of these (width, height) in points."""
    pages = [Image.new("RGB", size, "white") for size in sizes]
    buf = io.BytesIO()
    pages[0].save(buf, "PDF", save_all=True, append_images=pages[1:], resolution=72)
    return buf.getvalue()


def _post(served, path, **kw):
    return httpx.post(served["server"].url + path, timeout=60, **kw)


def test_the_page_and_its_files_are_served_under_the_policy(served):
    url = served["server"].url
    files = static_files()
    assert {"index.html", "page.css", "main.js", "api.js", "markdown.js"} <= set(files)
    for path in ["/"] + [f"/static/{name}" for name in files]:
        r = httpx.get(url + path, timeout=30)
        assert r.status_code == 200, path
        assert r.headers["content-security-policy"] == CSP and r.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'self'" in CSP and "script-src 'self';" in CSP and "unsafe" not in CSP
    assert httpx.get(url + "/static/main.js", timeout=30).headers["content-type"].startswith("text/javascript")
    check_error(httpx.get(url + "/static/nothing.js", timeout=30), 404, "no page file")
    assert httpx.get(url + "/static/..%2fapp.py", timeout=30).status_code == 404
    page = httpx.get(url + "/", timeout=30).text
    assert "<script" not in page.replace('<script type="module" src="/static/main.js"></script>', "")
    assert "style=" not in page and "http" not in page  # nothing inline, nothing from elsewhere


def test_the_tasks_are_the_models_own(served):
    config = httpx.get(served["server"].url + "/v1/tasks", timeout=30).json()
    assert config["model"] == "paddleocr-vl" and config["limits"]["max_image_pixels"] == 40000
    assert [(t["name"], t["prompt"]) for t in config["tasks"]] == list(SPEC.tasks.items())
    spotting = next(t for t in config["tasks"] if t["name"] == "spotting")
    assert spotting["boxes"] is True and spotting["request"] == {
        "skip_special_tokens": False, "mm_processor_kwargs": {"min_pixels": 112896, "max_pixels": 1605632}}
    assert all(t["request"] == {} and not t["boxes"] for t in config["tasks"] if t["name"] != "spotting")


def test_an_answer_is_post_processed_as_infer_does(served):
    r = _post(served, "/v1/postprocess", json={"text": SPOTTING, "task": "spotting", "width": 500, "height": 34})
    assert r.status_code == 200, r.text
    out = r.json()
    want = parse_spotting(SPOTTING, 500, 34)
    assert out["text"] == SPOTTING and out["task"] == "spotting" and len(out["boxes"]) == len(want) == 1
    assert out["boxes"][0] == {"text": "Total", "box": want[0]["box"], "points": want[0]["poly"]}
    # the task found from its prompt; another task's answer has no boxes
    by_prompt = _post(served, "/v1/postprocess", json={"text": SPOTTING, "prompt": "Spotting:", "width": 500,
                                                        "height": 34}).json()
    assert by_prompt["task"] == "spotting" and by_prompt["boxes"] == out["boxes"]
    assert _post(served, "/v1/postprocess", json={"text": SPOTTING, "task": "ocr", "width": 5,
                                                  "height": 5}).json()["boxes"] == []
    check_error(_post(served, "/v1/postprocess", json={"text": "x", "task": "poem", "width": 5, "height": 5}), 400,
                "unknown task 'poem'")
    check_error(_post(served, "/v1/postprocess", json={"text": "x", "width": 0, "height": 5}), 400, "width and height")
    check_error(_post(served, "/v1/postprocess", json={"text": 5, "width": 5, "height": 5}), 400, "text must be")
    check_error(_post(served, "/v1/postprocess", content=b"{"), 400, "not valid JSON")


def test_pdf_pages_are_counted_and_rendered(served):
    pdf = _pdf((100, 50), (144, 72))
    assert _post(served, "/v1/pages", content=pdf).json()["pages"] == 2
    r = _post(served, "/v1/pages/render?page=2&dpi=100", content=pdf)
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(r.content)).size == (200, 100) and r.headers["x-page-count"] == "2"
    # the server's --max-image-pixels (40,000 here) lowers the DPI: the page it returns is one it accepts
    big = Image.open(io.BytesIO(_post(served, "/v1/pages/render?page=2&dpi=600", content=pdf).content))
    assert big.width * big.height <= 40000 and abs(big.width / big.height - 2) < 0.05
    check_error(_post(served, "/v1/pages/render?page=3", content=pdf), 400, "the PDF has no page 3 (it has 2)")
    check_error(_post(served, "/v1/pages/render?page=x", content=pdf), 400, "page must be an integer")
    check_error(_post(served, "/v1/pages/render?dpi=5000", content=pdf), 400, "dpi must be in 10..600")
    check_error(_post(served, "/v1/pages", content=b"GIF89a"), 400, "the file is not a readable PDF")
    check_error(_post(served, "/v1/pages", content=b""), 400, "the PDF is empty")


def test_the_pixel_cap_of_a_page_and_the_decode_budget():
    from ms_ocr.serve.media import DecodeBudget
    budget = DecodeBudget(10 ** 6)
    pages = PdfPages(MediaLimits(max_pixels=64 * 10 ** 6, max_request_pixels=10 ** 6, budget=budget))
    assert pages.pixel_limit() == 10 ** 6  # the smallest of the batch runner's cap and the server's limits
    png, width, height, count = pages.render_png(_pdf((2000, 1000)), 1, dpi=600)
    assert count == 1 and width * height <= 10 ** 6 and budget.free == 10 ** 6  # its pixels given back


@pytest.mark.parametrize("path", ["/v1/tasks", "/v1/postprocess", "/v1/pages", "/v1/pages/render"])
def test_the_api_key_covers_the_pages_endpoints(served, path):
    server = served["server"]
    server.state.api_key = "k"
    try:
        r = httpx.request("GET" if path == "/v1/tasks" else "POST", server.url + path, timeout=30)
        check_error(r, 401, "invalid or missing API key")
        assert httpx.get(server.url + "/", timeout=30).status_code == 200  # the page itself is open
    finally:
        server.state.api_key = None
