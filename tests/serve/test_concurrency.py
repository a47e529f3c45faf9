"""Concurrent requests share decode steps and each still gets its single-request answer; a burst beyond
--max-num-seqs + --max-queue gets 503s while the accepted requests finish."""

import asyncio

import pytest

from ms_ocr.generate import SamplingConfig
from ms_ocr.runtime import Buckets
from tests.serve.live import LiveServer, jpeg_url, metric, page

# 16 pages of three sizes (different prompt lengths and vision shapes; each new shape compiles, so few) and
# different contents and token budgets
SIZES = [(96, 128), (200, 56), (64, 64)]
CASES = [(SIZES[i % len(SIZES)], 100 + i, 6 + 5 * (i % 7)) for i in range(16)]


def messages(url):
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": "OCR:"}]}]


async def ask_all(base, jobs, timeout=600):
    """Every (url, max_tokens) at once; the response or the openai exception of each."""
    from openai import AsyncOpenAI
    async with AsyncOpenAI(base_url=base + "/v1", api_key="EMPTY", max_retries=0, timeout=timeout) as client:
        async def one(url, n):
            return await client.chat.completions.create(model="paddleocr-vl", messages=messages(url), temperature=0,
                                                        max_tokens=n)
        return await asyncio.gather(*[one(u, n) for u, n in jobs], return_exceptions=True)


def load(tiny_dir):
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    return paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64))


def test_sixteen_concurrent_requests_equal_single_requests_and_are_batched(tiny_dir, graph_mode):
    pipe = load(tiny_dir)
    jobs, want = [], [None] * len(CASES)
    for (w, h), seed, n in CASES:
        jobs.append(jpeg_url(page(w, h, seed)) + (n,))
    for i in sorted(range(len(CASES)), key=lambda i: CASES[i][0]):  # one size after another: fewer compiles
        want[i] = pipe.run([jobs[i][1]], "OCR:", SamplingConfig(max_new_tokens=jobs[i][2]))
    jobs = [(url, n) for url, _, n in jobs]
    server = LiveServer(pipe, "paddleocr-vl", "--max-model-len", "512", "--max-num-seqs", "4", "--max-queue", "16")
    try:
        got = asyncio.run(ask_all(server.url, jobs))
        text = server.metrics()
    finally:
        server.close()
    for i, (r, w) in enumerate(zip(got, want)):
        assert not isinstance(r, Exception), f"request {i}: {r}"
        assert r.choices[0].message.content == w["text"], f"request {i}"
        assert r.usage.completion_tokens == len(w["token_ids"]), f"request {i}"
    batched = sum(metric(text, "ms_ocr:decode_steps_total", running=n) for n in (2, 3, 4))
    assert batched > 0, text  # decode steps advanced several sequences together
    assert metric(text, "ms_ocr:decode_steps_total", running=5) == 0  # never more than --max-num-seqs
    # each step computed the cache rows its running sequences needed: 1, 2 or 4 (not always 4)
    rows = {n: metric(text, "ms_ocr:decode_step_rows_total", rows=n) for n in (1, 2, 4)}
    assert sum(rows.values()) == sum(metric(text, "ms_ocr:decode_steps_total", running=n) for n in (1, 2, 3, 4))
    assert rows[1] + rows[2] > 0, text
    assert metric(text, "ms_ocr:request_total", status="200") == 16


def test_burst_beyond_the_queue_gets_503_and_the_rest_finish(tiny_dir, graph_mode):
    from openai import APIStatusError
    pipe = load(tiny_dir)
    url, img = jpeg_url(page(96, 128, 1))
    n = 300
    want = pipe.run([img], "OCR:", SamplingConfig(max_new_tokens=n))
    server = LiveServer(pipe, "paddleocr-vl", "--max-model-len", "512", "--max-num-seqs", "2", "--max-queue", "2",
                        "--no-warmup")
    try:
        got = asyncio.run(ask_all(server.url, [(url, n)] * 12))
        busy = [r for r in got if isinstance(r, APIStatusError)]
        done = [r for r in got if not isinstance(r, Exception)]
        assert len(busy) + len(done) == 12, [r for r in got if isinstance(r, Exception) and r not in busy]
        assert 4 <= len(done) < 12 and busy
        assert all(e.status_code == 503 and "busy" in e.message for e in busy)
        assert all(r.choices[0].message.content == want["text"] for r in done)
        # the server keeps serving afterwards
        again = asyncio.run(ask_all(server.url, [(url, 8)]))[0]
        assert again.choices[0].message.content == pipe.processor.decode(want["token_ids"][:8])
        assert metric(server.metrics(), "ms_ocr:request_total", status="503") == len(busy)
    finally:
        server.close()
