"""Every class of bad input gets OpenAI's error shape with its status and a one-line message, never a
traceback; the server keeps serving, and good requests running alongside bad ones get their answers."""

import asyncio

import httpx
import pytest

from tests.serve.conftest import MAX_LEN, body, check_error, data_url, png_bytes, post
from tests.serve.live import jpeg_url, page, png_url



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
