"""python -m ms_ocr.serve as users start it: one-line errors for bad options; a real server process on a free
loopback port answers /health, /v1/models and a chat completion, and stops cleanly on SIGINT."""

import os
import signal
import socket
import subprocess
import sys
import time

import httpx

from tests.cli_util import ROOT, assert_one_line_error, run_module
from tests.serve.live import jpeg_url, page


def test_bad_options_are_one_line_errors(tiny_dir):
    assert_one_line_error(run_module("ms_ocr.serve", "--model", "nope"), "unknown model")
    assert_one_line_error(run_module("ms_ocr.serve", "--model", "paddleocr-vl", "--max-num-seqs", "0"),
                          "--max-num-seqs")
    assert_one_line_error(run_module("ms_ocr.serve", "--model", "paddleocr-vl", "--model-path", tiny_dir,
                                     "--allowed-local-media-path", "/no/such/dir"), "--allowed-local-media-path")
    assert_one_line_error(run_module("ms_ocr.serve", "--model", "paddleocr-vl", "--model-path", "/no/such/model"),
                          "does not exist")
    assert_one_line_error(run_module("ms_ocr.serve", "--model", "paddleocr-vl", "--model-path", tiny_dir,
                                     "--max-model-len", str(10 ** 7), "--no-warmup"), "max_position_embeddings")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_process_serves_and_stops(tiny_dir):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3", MS_OCR_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "ms_ocr.serve", "--model", "paddleocr-vl", "--model-path", tiny_dir,
                             "--port", str(port), "--served-model-name", "PaddleOCR-VL-0.9B", "--max-model-len", "512",
                             "--max-num-seqs", "2"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "server did not come up"
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        models = httpx.get(base + "/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["PaddleOCR-VL-0.9B"] and models["data"][0]["max_model_len"] == 512
        url, _ = jpeg_url(page(96, 128, 1))
        r = httpx.post(base + "/v1/chat/completions", timeout=120, json={
            "model": "PaddleOCR-VL-0.9B", "max_tokens": 5, "temperature": 0,
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                      {"type": "text", "text": "OCR:"}]}]})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5, r.text
        assert 'ms_ocr:request_total{model_name="PaddleOCR-VL-0.9B",status="200",finished_reason="length"} 1' in \
            httpx.get(base + "/metrics", timeout=10).text
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and f"serving PaddleOCR-VL-0.9B on http://127.0.0.1:{port}/v1" in err
