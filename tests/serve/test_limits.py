"""One client or one small file must not take the server down: images counted and measured from their headers
before any decoding, decoding bounded across requests, connections capped with a header deadline, an API key,
streams nobody reads, shutdown with requests in flight. Every test here failed on the code before these limits
(2026-12-06); loopback only, every loop bounded."""

import base64
import io
import json
import socket
import threading
import time

import httpx
import numpy as np
import pytest
from PIL import Image

from ms_ocr.serve import media as M
from ms_ocr.serve.media import MediaLimits, read_url
from ms_ocr.serve.protocol import ApiError
from tests.serve.conftest import body, check_error, data_url, png_bytes, post
from tests.serve.live import LiveServer


def white_png(width, height):
    buf = io.BytesIO()
    Image.new("L", (width, height), 255).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def image_body(*urls, text="OCR:", **fields):
    content = [{"type": "image_url", "image_url": {"url": u}} for u in urls] + [{"type": "text", "text": text}]
    return {"model": "paddleocr-vl", "messages": [{"role": "user", "content": content}], "max_tokens": 8,
            "temperature": 0, **fields}


# ---- images measured from their headers ------------------------------------------------------------------------

def test_images_per_request_are_capped_before_decoding():
    limits = MediaLimits(max_images=2)
    url = data_url(white_png(8, 8))
    with pytest.raises(ApiError, match=r"3 images; this server takes at most 2 per request"):
        M.read_images([url] * 3, limits)
    assert len(M.read_images([url] * 2, limits)[0]) == 2


def test_a_requests_pixels_are_summed_from_the_headers():
    """16 white PNGs of 8000x8000 (79 KB each) took the server from 1.3 to 5.6 GB: now refused from the headers,
    in milliseconds, before any pixel is decoded."""
    big = data_url(white_png(8000, 8000))
    assert len(big) < 200_000
    limits = MediaLimits(max_pixels=64 * 10 ** 6, max_request_pixels=64 * 10 ** 6, max_images=16)
    t0 = time.perf_counter()
    with pytest.raises(ApiError, match=r"more than 64000000 pixels together \(--max-request-pixels\)"):
        M.read_images([big] * 16, limits)
    assert time.perf_counter() - t0 < 2.0  # a decode of one of them alone takes longer
    encoded, pixels = M.read_images([big], limits)
    assert pixels == 64 * 10 ** 6 and len(encoded) == 1


def test_an_extreme_aspect_ratio_is_refused_from_the_header():
    """A 64,000,000x1 PNG passed the pixel limit and took 4.75 s and 1.4 GB to decode before the processor
    refused its aspect ratio."""
    strip = white_png(64_000_000, 1)
    t0 = time.perf_counter()
    with pytest.raises(ApiError, match=r"aspect ratio 64000000.0 exceeds 200 \(the image is 64000000x1"):
        M.image_size(strip, MediaLimits())
    assert time.perf_counter() - t0 < 1.0
    assert M.image_size(white_png(400, 2), MediaLimits()) == (400, 2)  # 200:1 itself is allowed


def test_the_cli_refuses_an_extreme_aspect_ratio_before_decoding(tmp_path):
    from ms_ocr.processing.image import ImageError, load_image
    path = tmp_path / "strip.png"
    path.write_bytes(white_png(64_000_000, 1))
    t0 = time.perf_counter()
    with pytest.raises(ImageError, match="aspect ratio 64000000.0 exceeds 200"):
        load_image(path)
    assert time.perf_counter() - t0 < 1.0


def test_decoding_is_bounded_across_requests():
    """Decoded pixels are taken from one budget: a second request waits until the first gives its pixels back,
    and one that cannot get them in time is a 503."""
    limits = MediaLimits(budget=M.DecodeBudget(100, wait=0.3))
    small = [white_png(8, 8)]
    with M.Decoded(small, 64, limits) as images:
        assert images[0].size == (8, 8) and limits.budget.free == 36
        with pytest.raises(ApiError) as e:
            with M.Decoded(small, 64, limits):
                pass
        assert e.value.status == 503
        got = []
        waiter = threading.Thread(target=lambda: got.append(M.Decoded(small, 64, MediaLimits(
            budget=limits.budget)).__enter__()))
        limits.budget.wait = 5.0
        waiter.start()
        time.sleep(0.2)
        assert not got  # waiting for the first request's pixels
    waiter.join(5)
    assert got and limits.budget.free == 36


def test_a_failed_decode_gives_its_pixels_back():
    limits = MediaLimits(budget=M.DecodeBudget(100))
    with pytest.raises(ApiError):
        with M.Decoded([b"\x89PNG\r\n\x1a\nbroken"], 50, limits):
            pass
    assert limits.budget.free == 100


def test_data_urls_in_upper_case_are_data_urls():
    """`DATA:image/png;BASE64,...` was refused with a message about unsupported schemes."""
    raw = white_png(8, 8)
    assert read_url("DATA:image/png;BASE64," + base64.b64encode(raw).decode(), MediaLimits()) == raw


def test_the_image_byte_limit_holds_for_data_and_file_urls(tmp_path):
    raw = white_png(300, 300)
    limits = MediaLimits(max_bytes=len(raw) - 1, allowed_local_path=str(tmp_path))
    with pytest.raises(ApiError, match=f"larger than {len(raw) - 1} bytes"):
        read_url(data_url(raw), limits)
    (tmp_path / "p.png").write_bytes(raw)
    with pytest.raises(ApiError, match=f"larger than {len(raw) - 1} bytes"):
        read_url(f"file://{tmp_path}/p.png", limits)
    assert read_url(f"file://{tmp_path}/p.png", MediaLimits(max_bytes=len(raw), allowed_local_path=str(tmp_path)))


def test_file_urls_with_a_nul_or_a_host_are_400s(tmp_path):
    """`file:///...%00.jpg` was a 500 with a traceback in the log; `file://host/path` read /path of this machine."""
    (tmp_path / "p.png").write_bytes(white_png(8, 8))
    limits = MediaLimits(allowed_local_path=str(tmp_path))
    with pytest.raises(ApiError, match="NUL") as e:
        read_url(f"file://{tmp_path}/p.png%00.jpg", limits)
    assert e.value.status == 400
    with pytest.raises(ApiError, match="may not name a host") as e:
        read_url(f"file://otherhost{tmp_path}/p.png", limits)
    assert e.value.status == 400
    assert read_url(f"file://localhost{tmp_path}/p.png", limits) == (tmp_path / "p.png").read_bytes()


def test_a_served_request_over_the_limits_is_a_400_and_the_server_serves_on(served):
    big = data_url(white_png(300, 300))  # over the fixture's --max-image-pixels 40000
    check_error(post(served, image_body(big)), 400, "--max-image-pixels")
    tiny = data_url(png_bytes(served["img"]))
    check_error(post(served, image_body(*[tiny] * 9)), 400, "at most 8 per request")
    r = post(served, image_body(tiny))
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == served["want"]["text"]


# ---- the API key ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def keyed(tiny_dir, graph_mode):
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from ms_ocr.runtime import Buckets
    pipe = paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64))
    server = LiveServer(pipe, "paddleocr-vl", "--max-model-len", "256", "--max-num-seqs", "2", "--no-warmup",
                        "--api-key", "s3cret", "--header-timeout", "1", "--max-connections", "24",
                        "--stall-timeout", "2")
    yield server
    server.close()


def _page_url():
    from tests.serve.live import page
    return data_url(png_bytes(page(96, 128, 3)))


def test_a_wrong_or_missing_api_key_is_a_401(keyed):
    url = keyed.url + "/v1/chat/completions"
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
        r = httpx.post(url, json=image_body(_page_url()), headers=headers, timeout=60)
        assert r.status_code == 401, r.text
        assert "API key" in r.json()["error"]["message"] and r.json()["error"]["code"] == 401
    assert httpx.get(keyed.url + "/v1/models", timeout=10).status_code == 401
    assert httpx.get(keyed.url + "/health", timeout=10).status_code == 200  # probes need no key
    r = httpx.post(url, json=image_body(_page_url()), headers={"authorization": "Bearer s3cret"}, timeout=120)
    assert r.status_code == 200, r.text
    client = keyed.client()  # the openai client sends the key as a bearer token
    client.api_key = "s3cret"
    assert client.models.list().data[0].id == "paddleocr-vl"


def test_the_api_key_comes_from_the_environment(monkeypatch):
    from ms_ocr.serve import cli
    monkeypatch.setenv(cli.API_KEY_ENV, "from-env")
    assert cli.build_parser().parse_args(["--model", "paddleocr-vl"]).api_key == "from-env"
    monkeypatch.delenv(cli.API_KEY_ENV)
    assert cli.build_parser().parse_args(["--model", "paddleocr-vl"]).api_key is None


@pytest.mark.parametrize("host,warned", [("0.0.0.0", True), ("192.168.1.5", True), ("127.0.0.1", False),
                                         ("::1", False), ("localhost", False)])
def test_binding_beyond_loopback_without_a_key_warns(host, warned):
    from ms_ocr.serve import cli
    assert cli._loopback(host) is not warned


# ---- connections -------------------------------------------------------------------------------------------------

def _half_request(url):
    host, port = url.split("//")[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(b"POST /v1/chat/completions HTT")  # half a request line, then nothing
    return s


def _closed(sock, within):
    sock.settimeout(within)
    try:
        return sock.recv(1024) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_a_connection_that_never_finishes_its_headers_is_closed(keyed):
    s = _half_request(keyed.url)
    try:
        assert _closed(s, 5.0)  # --header-timeout 1
    finally:
        s.close()


def test_idle_connections_cannot_lock_out_health(keyed):
    """260 half-request sockets under `ulimit -n 256` made /health time out: at the cap (24 here) a new
    connection evicts the oldest one still waiting for its headers."""
    socks = [_half_request(keyed.url) for _ in range(40)]
    try:
        for _ in range(5):
            assert httpx.get(keyed.url + "/health", timeout=5).status_code == 200
        evicted = sum(_closed(s, 0.05) for s in socks[:16])
        assert evicted >= 10  # the oldest went first
    finally:
        for s in socks:
            s.close()


def test_the_connection_cap_is_kept_below_the_descriptor_limit():
    import resource

    from ms_ocr.serve.connections import DESCRIPTORS_KEPT, connection_cap
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connection_cap(10 ** 9) == soft - DESCRIPTORS_KEPT
    assert connection_cap(100) == 100


def test_accept_failures_are_reported_once():
    import asyncio
    import logging

    from ms_ocr.serve.connections import AcceptErrors
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    log = logging.getLogger("ms_ocr.serve")
    log.addHandler(handler)
    try:
        loop = asyncio.new_event_loop()
        errors = AcceptErrors(quiet=60)
        for _ in range(500):
            errors(loop, {"message": "socket.accept() out of system resource",
                          "exception": OSError(24, "Too many open files")})
        loop.close()
    finally:
        log.removeHandler(handler)
    assert len(records) == 1 and "Too many open files" in records[0].getMessage()
    assert errors.missed == 499


# ---- streams and shutdown ---------------------------------------------------------------------------------------

def test_a_stream_nobody_reads_frees_its_request(keyed):
    """A client that never read its stream kept its slot until it disconnected."""
    host, port = keyed.url.split("//")[1].split(":")
    payload = json.dumps(image_body(_page_url(), stream=True, max_tokens=200, ignore_eos=True)).encode()
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer s3cret\r\n"
              b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(payload), payload))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if keyed.worker.outstanding == 0:
                break
            time.sleep(0.2)
        assert keyed.worker.outstanding == 0  # released while the client still holds the connection
    finally:
        s.close()


def test_shutdown_answers_requests_in_flight(tiny_dir, graph_mode):
    """SIGTERM answered plain-text 500s and cut streams: now a JSON 503, and a stream's error chunk and [DONE]."""
    import signal

    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from ms_ocr.runtime import Buckets
    pipe = paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=256))
    server = LiveServer(pipe, "paddleocr-vl", "--max-model-len", "256", "--max-num-seqs", "2", "--no-warmup")
    results = {}
    long = image_body(_page_url(), max_tokens=200, ignore_eos=True)

    def whole():
        results["whole"] = httpx.post(server.url + "/v1/chat/completions", json=long, timeout=60)

    def streamed():
        with httpx.stream("POST", server.url + "/v1/chat/completions", json=long | {"stream": True},
                          timeout=60) as r:
            results["stream"] = [line for line in r.iter_lines() if line]

    threads = [threading.Thread(target=whole), threading.Thread(target=streamed)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while server.worker.running < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.worker.running == 2
        server.server.handle_exit(signal.SIGTERM, None)
        for t in threads:
            t.join(30)
    finally:
        server.close()
    check_error(results["whole"], 503, "shutting down")
    lines = results["stream"]
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][len("data: "):])["error"]["code"] == 503


def test_sse_ends_with_an_error_chunk_and_done_on_shutdown(served):
    import asyncio

    from ms_ocr.serve.app import _sse
    from ms_ocr.serve.worker import ShuttingDown

    class Job:
        key, n_tokens = "chatcmpl-x", 0

        def __init__(self):
            self.events = asyncio.Queue()
            self.cancelled = threading.Event()

    class Req:
        stream_options = None

    state = served["server"].state
    state.worker.reserve()

    async def run():
        job = Job()
        await job.events.put(("delta", "ab"))
        await job.events.put(("error", ShuttingDown("the server is shutting down")))
        return [chunk async for chunk in _sse(state, Req(), job, 3)]

    chunks = asyncio.run(run())
    assert chunks[-1] == "data: [DONE]\n\n"
    err = json.loads(chunks[-2][len("data: "):])["error"]
    assert err["code"] == 503 and "shutting down" in err["message"]


# ---- the line reader ---------------------------------------------------------------------------------------------

def stripes(lines, width=400, pitch=8):
    """A page of `lines` black bars (each a text line to the line finder): 14 KB as PNG for 1,000 of them."""
    page = np.full((lines * pitch + pitch, width), 255, np.uint8)
    for i in range(lines):
        page[pitch + i * pitch:pitch + i * pitch + pitch // 2, 20:width - 20] = 0
    buf = io.BytesIO()
    Image.fromarray(page, "L").save(buf, format="PNG", optimize=True)
    return buf.getvalue()


@pytest.fixture(scope="module")
def line_reader(graph_mode):
    from ms_ocr.models import demo_checkpoint
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    pipe = paddleocr_vl.load(demo_checkpoint(), "CPU", "auto")
    assert pipe.line_height  # the demo model reads line by line
    server = LiveServer(pipe, "paddleocr-vl", "--max-model-len", "4096", "--max-num-seqs", "4", "--no-warmup",
                        "--max-lines-per-request", "64")
    yield server, pipe
    server.close()


def test_a_line_readers_lines_are_capped_per_request(line_reader):
    """A 14 KB image of 1,000 stripes became 1,000 line sequences."""
    server, pipe = line_reader
    raw = stripes(1000)
    assert len(raw) < 16_000
    assert len(pipe.prepare_request([Image.open(io.BytesIO(raw)).convert("RGB")], "OCR:")[1]) == 1000
    r = post({"server": server}, image_body(data_url(raw)))
    check_error(r, 400, "1000 text lines; this server reads at most 64 per request (--max-lines-per-request)")


def test_a_line_readers_lines_share_the_requests_token_budget(line_reader):
    """max_tokens and the context were checked per line: 100 lines with ignore_eos and max_tokens 300 generated
    37,600 tokens. Now the lines spend one budget, in reading order, and the answer ends where it is spent."""
    server, pipe = line_reader
    r = post({"server": server}, image_body(data_url(stripes(20)), max_tokens=30, ignore_eos=True))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["usage"]["completion_tokens"] == 30 and out["choices"][0]["finish_reason"] == "length"
    text = out["choices"][0]["message"]["content"]
    lines = [p for _, p in pipe.prepare_request([Image.open(io.BytesIO(stripes(20))).convert("RGB")], "OCR:")[1]]
    assert out["usage"]["prompt_tokens"] == sum(p.input_ids.shape[0] for p in lines)
    # streamed: the same text, cut at the same token
    chunks = server.client().chat.completions.create(
        model="paddleocr-vl", messages=image_body(data_url(stripes(20)))["messages"], max_tokens=30,
        temperature=0, stream=True, extra_body={"ignore_eos": True})
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text


def test_a_line_readers_prompts_count_against_the_context(line_reader):
    server, pipe = line_reader
    lines = pipe.prepare_request([Image.open(io.BytesIO(stripes(60))).convert("RGB")], "OCR:")[1]
    n_prompt = sum(p.input_ids.shape[0] for _, p in lines)
    over = 4096 - n_prompt + 1
    check_error(post({"server": server}, image_body(data_url(stripes(60)), max_tokens=over)), 400,
                f"you requested {n_prompt + over} tokens ({n_prompt} in the messages")


def test_sampling_extremes_answer_instead_of_failing():
    """A tiny temperature made NaN probabilities (30 / 1e-307 overflows: inf - inf) and the request failed;
    now it is the greedy choice."""
    from ms_ocr.generate import SamplingConfig, next_token
    rng = np.random.default_rng(0)
    logits = np.array([10.0, 30.0, 20.0], np.float32)
    assert next_token(logits, [], [], SamplingConfig(temperature=1e-307, seed=1), rng) == 1
    assert next_token(logits, [1], [1], SamplingConfig(repetition_penalty=1e308), rng) == 2
