"""An ms_ocr server in this process on a free loopback port (uvicorn in a thread, the engine in its own)."""

import base64
import io
import socket
import threading
import time

from PIL import Image

from bench.pages import page  # noqa: F401  (the serve tests take it from here)


class LiveServer:
    def __init__(self, pipe, model, *flags):
        from ms_ocr.models import get as model_spec
        from ms_ocr.serve.cli import _Server, build_parser, build_server, check_args, uvicorn_config
        args = self.args = build_parser().parse_args(["--model", model, *flags])
        check_args(args)
        self.state, app, self.worker = build_server(args, pipe, model_spec(model))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # the server `serve` runs (connection guard, shutdown answering requests in flight), on this socket
        self.server = _Server(uvicorn_config(self.args, app), self.worker)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.05)

    def client(self, **kw):
        from openai import OpenAI
        return OpenAI(base_url=self.url + "/v1", api_key="EMPTY", timeout=120, max_retries=0, **kw)

    def metrics(self):
        import httpx
        return httpx.get(self.url + "/metrics", timeout=10).text

    def close(self):
        self.server.should_exit = True
        self.thread.join(30)
        self.worker.stop()
        self.sock.close()


def metric(text, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, value = line.rsplit(" ", 1)
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
    return total


def jpeg_url(img):
    """(data URL, the decoded JPEG the server will see): PaddleX sends pages as JPEG data URLs."""
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="JPEG")
    data = buf.getvalue()
    return "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii"), Image.open(io.BytesIO(data)).convert("RGB")


def png_url(img):
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
