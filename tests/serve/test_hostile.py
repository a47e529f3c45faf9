"""A hostile or careless client (loopback only, every loop bounded): values that reach the engine, faults inside
it, remote image URLs aimed at the server's own network, slow sources, pixel overrides, odd JSON. The server
answers each with its own error and keeps serving the others."""

import asyncio
import threading
import time

import httpx
import pytest

from ms_ocr.serve import fetch as F
from ms_ocr.serve.media import MediaLimits, read_url
from ms_ocr.serve.protocol import ApiError
from tests.serve.conftest import MAX_LEN, body, check_error, data_url, png_bytes, post


def good(served):
    return body(data_url(png_bytes(served["img"])))


def assert_serving(served):
    r = post(served, good(served))
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == served["want"]["text"]
    assert httpx.get(served["server"].url + "/health", timeout=10).status_code == 200


def test_any_seed_a_client_may_send_leaves_the_engine_serving(served):
    """`"seed": -1` reached np.random.default_rng(-1) on the engine thread, which died: every later request
    hung while /health said 200. vLLM takes any 64-bit seed; negative ones now wrap, out-of-range ones are 400."""
    for seed in (-1, -2 ** 63, 2 ** 63 - 1):
        r = post(served, good(served) | {"seed": seed, "temperature": 0.7})
        assert r.status_code == 200, r.text
    check_error(post(served, good(served) | {"seed": 2 ** 70}), 400, "seed")
    assert_serving(served)


@pytest.mark.parametrize("field,value", [("temperature", 1e-300), ("temperature", 1e-307),
                                         ("repetition_penalty", 1e308)])
def test_extreme_sampling_values_answer(served, field, value):
    """Values pydantic accepts but whose arithmetic overflows (a logit over a tiny temperature, a huge penalty):
    the request is answered (a temperature that small is the greedy choice) and the engine serves on."""
    r = post(served, good(served) | {field: value, "seed": 3})
    assert r.status_code == 200, r.text
    if field == "temperature":
        assert r.json()["choices"][0]["message"]["content"] == served["want"]["text"]
    assert_serving(served)


def test_an_error_inside_the_engine_fails_that_request_alone(served, monkeypatch):
    pipe = served["server"].state.pipe
    real = pipe.finish
    calls = []

    def finish(*args, **kw):  # post-processing raises for the first request only
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("post-processing fault")
        return real(*args, **kw)

    monkeypatch.setattr(pipe, "finish", finish)
    check_error(post(served, good(served)), 500, "post-processing fault")
    assert_serving(served)


def test_a_fault_of_the_engine_loop_fails_its_requests_and_the_loop_restarts(served, monkeypatch):
    worker = served["server"].worker
    engine, restarts = worker.engine, worker.restarts
    real = engine._step
    once = []

    def step(*args):
        if not once:
            once.append(1)
            raise RuntimeError("decode step fault")
        return real(*args)

    monkeypatch.setattr(engine, "_step", step)
    check_error(post(served, good(served)), 500, "decode step fault")
    assert worker.restarts == restarts + 1
    assert_serving(served)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_health_reports_a_dead_engine_loop():
    from ms_ocr.serve.app import ServerState, create_app
    from ms_ocr.serve.metrics import Metrics
    from ms_ocr.serve.worker import EngineWorker

    class Engine:  # a loop that ends by something no request can cause (the thread dies)
        batch = 1

        class pipe:  # a model that reads whole images (no line reader around the source)
            line_height = None

        def serve(self, take, on_result):
            raise SystemExit("engine thread gone")

    worker = EngineWorker(Engine(), 0)
    worker.start()
    worker.thread.join(10)
    state = ServerState(None, worker, "m", 16, MediaLimits(), Metrics("m"))
    from fastapi.testclient import TestClient
    with TestClient(create_app(state)) as client:
        assert client.get("/health").status_code == 503


# ---- remote image URLs ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ip", ["127.0.0.1", "127.8.9.10", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254",
                                "100.64.0.1", "0.0.0.0", "224.0.0.1", "::1", "fe80::1", "fc00::1", "::ffff:127.0.0.1",
                                "::ffff:10.1.2.3", "::"])
def test_non_public_addresses_are_refused(ip):
    assert not F.address_allowed(ip)


@pytest.mark.parametrize("ip", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_are_allowed(ip):
    assert F.address_allowed(ip)


def test_remote_urls_are_off_by_default(served):
    limits = MediaLimits()  # what `serve` runs with unless told otherwise
    with pytest.raises(ApiError, match="does not fetch http"):
        read_url(served["http"] + "/page.png", limits)
    with pytest.raises(ApiError, match="not allowed on this server"):
        read_url("http://elsewhere.example/page.png", MediaLimits(allowed_domains=("127.0.0.1",)))


def test_an_allowed_host_on_a_loopback_address_is_refused(served):
    """The operator allowed a name; it resolves to loopback (as a hostile DNS record would): refused without
    --allow-private-media-addresses, before any connection."""
    limits = MediaLimits(allowed_domains=("localhost", "127.0.0.1"))
    for url in (served["http"] + "/page.png", served["http"].replace("127.0.0.1", "localhost") + "/page.png"):
        with pytest.raises(ApiError, match="not a public internet address"):
            read_url(url, limits)


def test_errors_do_not_tell_refused_from_silent_ports():
    """A closed port and an open one that never answers read alike, bar the deadline."""
    closed = _free_port()
    limits = MediaLimits(allowed_domains=("127.0.0.1",), allow_private=True, fetch_timeout=2)
    with pytest.raises(ApiError) as e:
        read_url(f"http://127.0.0.1:{closed}/x.png", limits)
    assert "connection failed" in e.value.message and "refused" not in e.value.message.lower()
    assert "Errno" not in e.value.message


def test_a_trickling_source_is_cut_at_the_deadline(served):
    """A source sending a byte every 0.5 s (30 s in all) ends at the 2-s deadline for the whole fetch, not at a
    per-read timeout."""
    limits = MediaLimits(allowed_domains=("127.0.0.1",), allow_private=True, fetch_timeout=2)
    t0 = time.monotonic()
    with pytest.raises(ApiError, match="no answer within 2 s"):
        read_url(served["http"] + "/drip", limits)
    assert time.monotonic() - t0 < 10


def test_an_endless_body_is_cut_at_the_byte_limit(served):
    limits = MediaLimits(max_bytes=100_000, allowed_domains=("127.0.0.1",), allow_private=True, fetch_timeout=20)
    with pytest.raises(ApiError, match="larger than 100000 bytes"):
        read_url(served["http"] + "/endless", limits)


def test_redirects_are_checked_like_the_first_url(served):
    limits = MediaLimits(allowed_domains=("127.0.0.1",), allow_private=True, fetch_timeout=5)
    with pytest.raises(ApiError, match="media.example.invalid are not allowed"):
        read_url(served["http"] + "/away", limits)
    assert read_url(served["http"] + "/hop", limits) == (served["media"] / "page.png").read_bytes()


def test_slow_sources_do_not_hold_up_other_requests(served):
    """Six requests whose image trickles in (the server's deadline is 3 s) while a data-URL request runs: it
    finishes before any of them (before: the fetches filled the thread pool it needed, 97 s)."""
    done = []

    def send(name, payload):
        r = post(served, payload)
        done.append((name, r.status_code, r.text))

    threads = [threading.Thread(target=send, args=("slow", body(served["http"] + "/drip"))) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    send("good", good(served))
    for t in threads:
        t.join(30)
    assert done[0][:2] == ("good", 200), done
    slow = [d for d in done if d[0] == "slow"]
    assert len(slow) == 6 and all(code == 400 and "no answer within 3 s" in text for _, code, text in slow), slow


# ---- pixels, JSON, models -----------------------------------------------------------------------------------------

def test_pixel_overrides_are_clamped_to_the_checkpoint(served):
    """{"min_pixels": 1e8, "max_pixels": 1e8} on a small page took the server from 0.74 to 5 GB before a 400:
    the request's bounds are clamped to the checkpoint's max_pixels before any resize, so it costs what the
    largest page the model accepts costs."""
    settings = served["server"].state.pipe.processor.settings
    from ms_ocr.serve.prompt import clamp_pixels
    assert clamp_pixels(settings, {"min_pixels": 10 ** 8, "max_pixels": 10 ** 8}) == \
        {"min_pixels": settings.max_pixels, "max_pixels": settings.max_pixels}
    f = settings.patch_size * settings.merge_size
    assert clamp_pixels(settings, {"max_pixels": 1}) == {"min_pixels": f * f, "max_pixels": f * f}
    from ms_ocr.processing.settings import smart_resize
    h, w = smart_resize(128, 96, f, settings.max_pixels, settings.max_pixels, enlarge_thin=True)
    r = post(served, good(served) | {"mm_processor_kwargs": {"min_pixels": 10 ** 8, "max_pixels": 10 ** 8}})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == served["want"]["timings"]["prompt_tokens"] - \
        _image_tokens(served, 128, 96) + h * w // (f * f)


def _image_tokens(served, height, width):
    settings = served["server"].state.pipe.processor.settings
    from ms_ocr.processing.settings import smart_resize
    f = settings.patch_size * settings.merge_size
    h, w = smart_resize(height, width, f, settings.min_pixels, settings.max_pixels, enlarge_thin=True)
    return h * w // (f * f)


@pytest.mark.parametrize("name,raw,needle", [
    ("lone surrogate", b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "lone surrogate"),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("NaN", b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', "not valid JSON"),
])
def test_odd_json_is_a_400(served, name, raw, needle):
    check_error(post(served, None, raw), 400, needle)


def test_a_body_past_the_limit_is_413(served):
    limit = served["server"].state.limits.max_request_bytes
    r = httpx.post(served["server"].url + "/v1/chat/completions", content=b" " * (limit + 1),
                   headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 413 and "larger than" in r.json()["error"]["message"]


def test_models_do_not_show_the_checkpoint_path(served):
    r = httpx.get(served["server"].url + "/v1/models", timeout=10).json()
    text = str(r)
    assert r["data"][0]["root"] == "paddleocr-vl"
    assert str(served["server"].state.pipe.model_dir) not in text and "/" not in r["data"][0]["root"]


def test_a_client_disconnect_logs_no_traceback(served, monkeypatch):
    engine = served["server"].worker.engine
    real = engine._step

    def slow_step(*args):  # the tiny model decodes 192 tokens in well under a second: make the answer take ~10 s
        time.sleep(0.05)
        return real(*args)

    monkeypatch.setattr(engine, "_step", slow_step)

    async def go():
        async with httpx.AsyncClient(timeout=60) as c:
            task = asyncio.create_task(c.post(served["server"].url + "/v1/chat/completions",
                                              json=good(served) | {"max_tokens": MAX_LEN - 64, "ignore_eos": True}))
            await asyncio.sleep(1.0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    import logging
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    keep = Keep(level=logging.DEBUG)
    log = logging.getLogger("uvicorn.error")  # where uvicorn writes "Exception in ASGI application" + traceback
    log.addHandler(keep)
    try:
        asyncio.run(go())
        time.sleep(1.5)  # the handler notices within 0.5 s
        assert_serving(served)
    finally:
        log.removeHandler(keep)
    assert not [r for r in records if r.exc_info], [r.getMessage() for r in records]


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_engine_loop_that_fails_as_it_starts_stops_instead_of_spinning(capfd):
    """A loop fault restarts the loop; one that recurs at once (a broken engine) restarted for ever, a line of log
    each time. More than MAX_FAULTS within FAULT_WINDOW seconds now stop it, and /health says 503."""
    from ms_ocr.serve import worker as W
    from ms_ocr.serve.app import ServerState, create_app
    from ms_ocr.serve.metrics import Metrics

    class Engine:
        batch, calls = 1, 0

        class pipe:
            line_height = None

        def serve(self, take, on_result):
            Engine.calls += 1
            raise RuntimeError("broken at start")

    worker = W.EngineWorker(Engine(), 0)
    worker.start()
    worker.thread.join(10)
    assert not worker.thread.is_alive() and Engine.calls == W.MAX_FAULTS + 1 and not worker.alive()
    err = capfd.readouterr().err
    assert err.count("restarted") == W.MAX_FAULTS and "stopped (RuntimeError: broken at start)" in err
    state = ServerState(None, worker, "m", 16, MediaLimits(), Metrics("m"))
    from fastapi.testclient import TestClient
    with TestClient(create_app(state)) as client:
        assert client.get("/health").status_code == 503
