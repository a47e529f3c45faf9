"""A real browser for the page tests (tests/serve/test_page*.py): Debian's chromium driven by Playwright (PyPI),
headless, its requests held to the server under test (anything else is recorded and refused), on the demo model
served in the test's process. Playwright's own browser download cannot be used offline: the system chromium is
launched by path. Missing either is a failure naming the package, never a skip. A test module takes the fixtures
with `from tests.serve.browser import browser, demo_server, scripted, tab  # noqa: F401`."""

import os
import re
import time

import pytest

from tests.cli_util import ROOT

CHROMIUM = "/usr/bin/chromium"
DONE = re.compile(r"^(Done|Failed|Stopped)")  # the status line once a request has ended
INVOICE = os.path.join(ROOT, "examples", "invoice.png")  # 500 x 34


def launch(playwright):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium package (apt-get install -y chromium; "
                    "scripts/ensure_env.sh test does it as root)", pytrace=False)
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True)


def playwright_or_fail():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install playwright (requirements-test.txt)", pytrace=False)
    return sync_playwright


class Tab:
    """One browser tab on the server's page: what it requested outside the server, its script errors, the
    responses it got (url -> headers) and the chat requests it sent (their JSON bodies)."""

    def __init__(self, browser, base_url, viewport=(1100, 420)):
        self.context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]},
                                           accept_downloads=True)
        self.page = self.context.new_page()
        self.base, self.outside, self.errors, self.headers, self.chats = base_url, [], [], {}, []
        self.page.route("**/*", self._route)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("response", lambda r: self.headers.__setitem__(r.url, r.headers))
        self.page.on("request", self._request)

    def _route(self, route):
        url = route.request.url
        if url == self.base or url.startswith(self.base + "/"):
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def _request(self, request):
        if request.url.endswith("/v1/chat/completions"):
            self.chats.append(request.post_data_json)

    def open(self, wait_for_tasks=True):
        from playwright.sync_api import expect
        self.page.goto(self.base + "/")
        if wait_for_tasks:
            expect(self.page.locator("#task option")).not_to_have_count(0)
        return self.page

    def read(self, image, task=None, timeout=120_000):
        """Open `image` (a path), pick `task`, press Read and wait for the request to end; the status line."""
        from playwright.sync_api import expect
        page = self.page
        page.set_input_files("#file", image)
        expect(page.locator("#source")).to_contain_text(os.path.basename(image))
        if task is not None:
            page.select_option("#task", task)
        page.click("#run")
        expect(page.locator("#status")).to_have_text(DONE, timeout=timeout)
        return page.text_content("#status")

    def close(self):
        self.context.close()


@pytest.fixture(scope="module")
def demo_server(graph_mode):
    """The demo model (a PaddleOCR-VL line reader) served in this process."""
    from ms_ocr.models import demo_checkpoint
    from ms_ocr.models.paddleocr_vl import SPEC
    from tests.serve.live import LiveServer
    pipe = SPEC.load(demo_checkpoint(), "CPU", "auto")
    server = LiveServer(pipe, "paddleocr-vl", "--max-model-len", "4096", "--max-num-seqs", "2", "--no-warmup")
    yield server
    server.close()


@pytest.fixture(scope="module")
def browser():
    sync_playwright = playwright_or_fail()
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


@pytest.fixture
def tab(browser, demo_server):
    """A tab on the served page; at its end it must have asked nothing outside the server and thrown no error."""
    tab = Tab(browser, demo_server.url)
    yield tab
    try:
        assert tab.outside == [], f"the page requested outside the server: {tab.outside}"
        assert tab.errors == [], tab.errors
    finally:
        tab.close()


@pytest.fixture
def scripted(monkeypatch):
    """scripted(text, delay=0) -> the tokens seen: each served answer is `text`, sent as one delta at the request's
    first token (which ends it), or with `delay` seconds a token, the tokens each sent as "tick " and the answer
    never ended by the script. The model still reads the image; only what the stream says is chosen."""
    from ms_ocr.serve.worker import Job

    def script(text, delay=0.0):
        said, seen = set(), []

        def add(self, token):
            seen.append(token)
            if delay:
                time.sleep(delay)
                self._post("delta", "tick ")
                return False
            if self.key not in said:
                said.add(self.key)
                self._post("delta", text)
            return True
        monkeypatch.setattr(Job, "_add", add)
        return seen
    return script
