"""Every class of bad input gets OpenAI's error shape with its status and a one-line message, never a
traceback; the server keeps serving, and good requests running alongside bad ones get their answers."""

import asyncio
import base64
import http.server
import io
import threading

import httpx
import pytest

from ms_ocr.generate import SamplingConfig
from ms_ocr.runtime import Buckets
from tests.serve.live import LiveServer, jpeg_url, page, png_url

MAX_LEN = 256


@pytest.fixture(scope="module")
def served(tiny_dir, graph_mode, tmp_path_factory):
    from ms_ocr.models import paddleocr_vl
    pipe = paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64))
    media = tmp_path_factory.mktemp("media")
    img = page(96, 128, 3)
    img.save(media / "page.png")
    outside = tmp_path_factory.mktemp("outside") / "page.png"
    img.save(outside)
    want = pipe.run([img], "OCR:", SamplingConfig(max_new_tokens=8))
    # a loopback http server for http:// image URLs
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(media))  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    server = LiveServer(pipe, "paddleocr-vl", "--max-model-len", str(MAX_LEN), "--max-num-seqs", "2",
                        "--max-image-pixels", "40000", "--allowed-local-media-path", str(media), "--no-warmup")
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


BAD_REQUESTS = [
    ("not json", None, b"{not json", 400, "not valid JSON"),
    ("no messages", {"model": "paddleocr-vl"}, None, 400, "messages"),
    ("bad temperature", body(temperature=-1), None, 400, "temperature"),
    ("bad top_p", body(top_p=0), None, 400, "top_p"),
    ("bad max_tokens type", body(max_tokens="many"), None, 400, "max_tokens"),
    ("n > 1", body(n=2), None, 400, "n"),
    ("assistant turn", {"model": "paddleocr-vl", "messages": [{"role": "assistant", "content": "x"}]}, None, 400,
     "role"),
    ("unknown mm kwarg", body(mm_processor_kwargs={"fps": 2}), None, 400, "mm_processor_kwargs"),
    ("bad vllm_xargs", body(vllm_xargs={"ngram_size": "x"}), None, 400, "vllm_xargs"),
    ("empty stop", body(stop=[""]), None, 400, "stop"),
    ("unknown model", {**body(), "model": "gpt-4o"}, None, 404, "does not exist"),
    ("too many tokens", body(max_tokens=MAX_LEN), None, 400, "maximum context length"),
    ("bad base64", body("data:image/png;base64,@@@@"), None, 400, "base64"),
    ("not an image", body(data_url(b"hello, not an image")), None, 400, "not readable"),
    ("ftp url", body("ftp://example.com/a.png"), None, 400, "unsupported image URL scheme"),
]


@pytest.mark.parametrize("name,payload,raw,status,needle", BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_request_gets_its_status(served, name, payload, raw, status, needle):
    check_error(post(served, payload, raw), status, needle)


def test_bad_images_and_media_urls(served):
    raw = png_bytes(served["img"])
    check_error(post(served, body(data_url(raw[: len(raw) // 2]))), 400, "truncated or corrupt")
    check_error(post(served, body(png_url(page(300, 300, 1)))), 400, "exceeds the server's limit of 40000 pixels")
    check_error(post(served, body(served["outside"].as_uri())), 400, "outside --allowed-local-media-path")
    check_error(post(served, body((served["media"] / "missing.png").as_uri())), 400, "not found")
    check_error(post(served, body(served["http"] + "/missing.png")), 400, "could not fetch")
    want = served["want"]["text"]
    for url in ((served["media"] / "page.png").as_uri(), served["http"] + "/page.png"):
        r = post(served, body(url))
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == want


def test_openai_client_sees_the_error(served):
    from openai import BadRequestError, NotFoundError
    client = served["server"].client()
    with pytest.raises(BadRequestError, match="maximum context length"):
        client.chat.completions.create(**body(max_tokens=10 * MAX_LEN))
    with pytest.raises(NotFoundError, match="does not exist"):
        client.chat.completions.create(**{**body(), "model": "other"})


def test_bad_requests_do_not_disturb_good_ones(served):
    """Good and bad requests at once: the good ones get their single-request answers, then the server serves."""
    from openai import AsyncOpenAI, BadRequestError
    url, _ = jpeg_url(served["img"])
    good = body(url)
    bad = [body(data_url(b"junk")), body(url, max_tokens=MAX_LEN), body(png_url(page(300, 300, 2)))]

    async def go():
        async with AsyncOpenAI(base_url=served["server"].url + "/v1", api_key="x", max_retries=0) as c:
            reqs = [good, bad[0], good, bad[1], good, bad[2], good]
            return await asyncio.gather(*[c.chat.completions.create(**r) for r in reqs], return_exceptions=True)

    got = asyncio.run(go())
    texts = [r.choices[0].message.content for r in got[0::2]]
    assert all(isinstance(r, BadRequestError) for r in got[1::2])
    assert len(set(texts)) == 1
    r = post(served, good)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == texts[0]
    assert httpx.get(served["server"].url + "/health").status_code == 200
