"""The served tiny PaddleOCR-VL of the error and hostile-client tests, and their request helpers."""

import base64
import http.server
import io
import threading
import time

import httpx
import pytest

from ms_ocr.generate import SamplingConfig
from ms_ocr.runtime import Buckets
from tests.serve.live import LiveServer, page

MAX_LEN = 256


class MediaHandler(http.server.SimpleHTTPRequestHandler):
    """Files of the media folder, plus hostile sources: /drip (a byte every 0.5 s, 60 in all), /endless (bytes
    without a Content-Length, never ending), /away (a redirect to a host the server does not allow),
    /hop (a redirect to /page.png)."""

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", "60")
            self.end_headers()
            for _ in range(60):
                try:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.5)
        elif self.path == "/endless":
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(4096):  # 256 MiB at most: bounded even if the client never stops reading
                    self.wfile.write(b"\0" * 65536)
            except OSError:
                return
        elif self.path in ("/away", "/hop"):
            self.send_response(302)
            self.send_header("Location", "http://media.example.invalid/page.png" if self.path == "/away"
                             else "/page.png")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            super().do_GET()


@pytest.fixture(scope="module")
def served(tiny_dir, graph_mode, tmp_path_factory):
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    pipe = paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64))
    media = tmp_path_factory.mktemp("media")
    img = page(96, 128, 3)
    img.save(media / "page.png")
    outside = tmp_path_factory.mktemp("outside") / "page.png"
    img.save(outside)
    want = pipe.run([img], "OCR:", SamplingConfig(max_new_tokens=8))
    # a loopback http server for http:// image URLs (the server allows 127.0.0.1 for these tests)
    handler = lambda *a: MediaHandler(*a, directory=str(media))  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    server = LiveServer(pipe, "paddleocr-vl", "--max-model-len", str(MAX_LEN), "--max-num-seqs", "2",
                        "--max-image-pixels", "40000", "--allowed-local-media-path", str(media), "--no-warmup",
                        "--allowed-media-domains", "127.0.0.1", "--allow-private-media-addresses",
                        "--media-fetch-timeout", "3")
    yield dict(server=server, media=media, outside=outside, want=want, img=img,
               http=f"http://127.0.0.1:{httpd.server_address[1]}")
    server.close()
    httpd.shutdown()


def body(url="", text="OCR:", **fields):
    content = ([{"type": "image_url", "image_url": {"url": url}}] if url else []) + [{"type": "text", "text": text}]
    return {"model": "paddleocr-vl", "messages": [{"role": "user", "content": content}], "max_tokens": 8,
            "temperature": 0, **fields}


def post(served, payload, raw=None):
    return httpx.post(served["server"].url + "/v1/chat/completions", json=None if raw is not None else payload,
                      content=raw, headers={"content-type": "application/json"}, timeout=120)


def check_error(resp, status, needle):
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["code"] == status and needle in err["message"], err
    assert "Traceback" not in resp.text and "\n" not in err["message"]


def png_bytes(img):
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def data_url(raw, mime="image/png"):
    return f"data:{mime};base64," + base64.b64encode(raw).decode()


