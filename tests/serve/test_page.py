"""The page at / (issue 81) in a real browser (tests/serve/browser.py: Debian's chromium under Playwright, headless,
loopback only) with the demo model served in this process: the invoice read as `infer` reads it, streamed, saved
as .json and .md (and the README's screenshot taken); the server's errors (a wrong API key, an image over its
limit, an unreadable PDF) in one line under the image; a streaming request cancelled, on the server too; PDF pages
rendered by the server and read. What the page draws and renders: tests/serve/test_page_render.py."""

import base64
import json
import os
import time

import httpx

from ms_ocr.models import demo_checkpoint
from tests.cli_util import ROOT, run_module
from tests.serve.browser import DONE, INVOICE, browser, demo_server, scripted, tab  # noqa: F401  (fixtures)

NOTE = os.path.join(ROOT, "examples", "note.png")
# The test's screenshot goes to its own folder; MS_OCR_PAGE_SCREENSHOT=docs/page.png writes the README's picture (a
# test run never rewrites a file of the repository on its own)
SCREENSHOT_ENV = "MS_OCR_PAGE_SCREENSHOT"


def test_the_page_reads_the_invoice_as_infer_does(tab, demo_server, tmp_path):
    reference = run_module("ms_ocr.infer", "--model-path", demo_checkpoint(), "--image", INVOICE)
    assert reference.returncode == 0, reference.stderr
    page = tab.open()
    assert page.locator("#task option").all_text_contents() == ["ocr", "table", "formula", "chart", "spotting",
                                                                 "seal", "custom prompt"]
    assert page.input_value("#prompt") == "OCR:"
    status = tab.read(INVOICE)
    assert status.startswith("Done"), (status, page.text_content("#error"))
    assert page.text_content("#raw") == reference.stdout.rstrip("\n") == "Invoice #2041 due 15 Mar 2026: $1,284.50"
    assert page.text_content("#rendered") == reference.stdout.rstrip("\n")
    # it arrived as a stream: one text node a delta, from a server-sent-event response
    assert page.evaluate("() => document.getElementById('raw').childNodes.length") > 3
    assert tab.headers[demo_server.url + "/v1/chat/completions"]["content-type"].startswith("text/event-stream")
    assert tab.chats[0]["stream"] is True and tab.chats[0]["messages"][0]["content"][1]["text"] == "OCR:"
    # the page and every file of it under the strict policy
    files = [u for u in tab.headers if u == demo_server.url + "/" or "/static/" in u]
    assert len(files) >= 10
    for url in files:
        csp = tab.headers[url]["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self';" in csp and "unsafe" not in csp, url
    shot = os.environ.get(SCREENSHOT_ENV) or str(tmp_path / "page.png")
    page.screenshot(path=shot)
    assert os.path.getsize(shot) > 10_000  # a picture of the page, text and all
    with page.expect_download() as download:
        page.click("#save-json")
    saved = json.loads(open(download.value.path(), encoding="utf-8").read())
    assert saved["text"] == saved["raw"] == reference.stdout.rstrip("\n") and saved["task"] == "ocr"
    assert saved["finish_reason"] == "stop" and saved["usage"]["completion_tokens"] > 0
    with page.expect_download() as download:
        page.click("#save-md")
    assert open(download.value.path(), encoding="utf-8").read() == reference.stdout


def test_a_wrong_api_key_shows_the_servers_error(tab, demo_server):
    demo_server.state.api_key = "right-key"
    try:
        page = tab.open(wait_for_tasks=False)
        answer = httpx.get(demo_server.url + "/v1/tasks", headers={"Authorization": "Bearer wrong"}, timeout=30)
        assert answer.status_code == 401
        from playwright.sync_api import expect
        expect(page.locator("#error")).to_have_text("401: " + answer.json()["error"]["message"])  # no key yet
        page.fill("#key", "wrong")
        page.press("#key", "Enter")
        expect(page.locator("#error")).to_have_text("401: " + answer.json()["error"]["message"])
        assert page.is_disabled("#run")
        page.fill("#key", "right-key")
        page.press("#key", "Enter")
        expect(page.locator("#error")).to_be_hidden()
        assert tab.read(INVOICE).startswith("Done")
        assert page.text_content("#raw") == "Invoice #2041 due 15 Mar 2026: $1,284.50"
        assert page.evaluate("() => [sessionStorage.length, localStorage.length]") == [1, 0]
    finally:
        demo_server.state.api_key = None


def test_an_image_over_the_servers_limit_is_refused_in_one_line(tab, demo_server):
    limits = demo_server.state.limits
    old, limits.max_pixels = limits.max_pixels, 10_000
    try:
        page = tab.open()
        assert tab.read(INVOICE).startswith("Failed")
        assert page.text_content("#error") == ("400: image of 500x34 pixels exceeds the server's limit of 10000 "
                                               "pixels (--max-image-pixels)")
        assert page.is_visible("#error") and page.text_content("#raw") == ""
    finally:
        limits.max_pixels = old


def test_a_streaming_request_is_cancelled(tab, demo_server, scripted):
    with open(INVOICE, "rb") as f:
        url = "data:image/png;base64," + base64.b64encode(f.read()).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "OCR:"}]
    whole = httpx.post(demo_server.url + "/v1/chat/completions", timeout=120,
                       json={"messages": [{"role": "user", "content": content}], "temperature": 0}).json()
    alone = whole["usage"]["completion_tokens"]  # the tokens of the whole answer
    seen = scripted("", delay=0.25)
    page = tab.open()
    page.set_input_files("#file", INVOICE)
    page.click("#run")
    from playwright.sync_api import expect
    expect(page.locator("#raw")).to_contain_text("tick tick", timeout=60_000)  # graphs of a new size compile first
    assert page.text_content("#run") == "Stop"
    page.click("#run")
    expect(page.locator("#status")).to_have_text(DONE)
    assert page.text_content("#status").startswith("Stopped") and page.text_content("#run") == "Read"
    deadline = time.monotonic() + 10  # the server drops it: the slot frees at its next decode step
    while demo_server.worker.counts() != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert demo_server.worker.counts() == (0, 0)
    stopped_at = len(seen)
    time.sleep(1)
    assert len(seen) == stopped_at < alone / 2, (stopped_at, alone)  # no token after the stop, far from the end


def test_a_pdf_page_is_rendered_by_the_server_and_read(tab, tmp_path):
    from PIL import Image
    pdf = tmp_path / "two pages.pdf"
    first, second = Image.open(NOTE).convert("RGB"), Image.open(INVOICE).convert("RGB")
    first.save(pdf, "PDF", save_all=True, append_images=[second], resolution=72)  # 1 px = 1 pt
    page = tab.open()
    page.set_input_files("#file", str(pdf))
    from playwright.sync_api import expect
    expect(page.locator("#source")).to_contain_text("page 1 of 2")
    assert page.text_content("#pages") == "of 2" and page.is_disabled("#prev")
    page.click("#next")
    expect(page.locator("#source")).to_contain_text("two pages.pdf, page 2 of 2 · 1389×95")  # 200 dpi: 500x34 pt
    page.click("#run")
    expect(page.locator("#status")).to_have_text(DONE, timeout=120_000)
    assert page.text_content("#status").startswith("Done") and "Invoice #2041" in page.text_content("#raw")
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7 not really")
    page.set_input_files("#file", str(broken))
    expect(page.locator("#error")).to_have_text("400: the file is not a readable PDF (Failed to load document "
                                                "(PDFium: Data format error))")
