"""The requests real clients send, through the openai client against an in-process server on tiny checkpoints:
PaddleX's GenAIClient for PaddleOCR-VL, HunyuanOCR's streamed request (and a client abandoning its stream),
DeepSeek-OCR's request with vllm_xargs. Greedy text equals `infer` (VLMPipeline.run) and transformers."""

import asyncio
import time

import pytest

from ms_ocr.generate import SamplingConfig
from ms_ocr.runtime import Buckets
from ms_ocr.textstream import TextStream
from tests.serve.live import LiveServer, jpeg_url, metric, page, png_url

N = 24
NGRAM_TOKENS = 120  # long enough for the tiny model to repeat a token without the guard


def streamed_text(tokenizer, ids, eos, skip=True):
    """What a stream of `ids` sends, by the server's own incremental detokeniser."""
    s = TextStream(tokenizer, skip, eos)
    out = []
    for t in ids:
        s.add(t)
        out.append(s.pending())
    return "".join(out) + s.pending(final=True)


@pytest.fixture(scope="module")
def paddle(tiny_dir, graph_mode):
    from ms_ocr.config_utils import load_config_json
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from ms_ocr.models.paddleocr_vl.config import PaddleOCRVLConfig
    from tests.helpers.reference import reference_greedy
    from tests.helpers.tiny_paddle import MAX_PIXELS, MIN_PIXELS
    pipe = paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64))
    url, img = jpeg_url(page(96, 128, 1))
    want = pipe.run([img], "OCR:", SamplingConfig(max_new_tokens=N))
    plain = pipe.run([img], "OCR:", SamplingConfig(max_new_tokens=NGRAM_TOKENS))
    ngram = pipe.run([img], "OCR:", SamplingConfig(max_new_tokens=NGRAM_TOKENS, no_repeat_ngram_size=1))
    small = 28 * 28 * 4
    proc = pipe.processor
    pipe.processor = type(proc)(proc.tokenizer, proc.chat_template,
                                type(proc.settings)(**{**vars(proc.settings), "max_pixels": small}), proc.image_token_id)
    smaller = pipe.run([img], "OCR:", SamplingConfig(max_new_tokens=N))
    # PaddleX's spotting request: its client upscaled the image already and asks for 112,896..1,605,632 pixels
    lo, hi = paddleocr_vl.task_pixels["spotting"]
    pipe.processor = type(proc)(proc.tokenizer, proc.chat_template,
                                type(proc.settings)(**{**vars(proc.settings), "min_pixels": lo, "max_pixels": hi}),
                                proc.image_token_id)
    spotting = pipe.run([img], "Spotting:", SamplingConfig(max_new_tokens=N))
    spotting["raw"] = pipe.processor.decode([t for t in spotting["token_ids"] if t not in pipe.eos_ids],
                                            skip_special_tokens=False)
    pipe.processor = proc
    cfg = PaddleOCRVLConfig.from_dict(load_config_json(tiny_dir))
    ref = reference_greedy(tiny_dir, cfg, [img], "OCR:", N)
    server = LiveServer(pipe, "paddleocr-vl", "--max-model-len", "512", "--max-num-seqs", "4")
    yield dict(server=server, url=url, want=want, plain=plain, ngram=ngram, smaller=smaller, small=small, ref=ref, pipe=pipe,
               pixels=(MIN_PIXELS, MAX_PIXELS), spotting=spotting)
    server.close()


def paddlex_messages(url, query):
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": query}]}]


async def paddlex_request(base, url, query, max_tokens, mm, skip_special_tokens=True):
    """PaddleX GenAIClient (vllm-server backend): AsyncOpenAI, the served model id from GET /models, then one
    chat completion with a JPEG data URL, temperature 0, max_completion_tokens and extra_body (its pipeline sends
    skip_special_tokens false for spotting)."""
    from openai import AsyncOpenAI
    async with AsyncOpenAI(base_url=base + "/v1", api_key="null", max_retries=0, timeout=600) as client:
        model = (await client.models.list()).data[0].id
        r = await client.chat.completions.create(
            model=model, messages=paddlex_messages(url, query), temperature=0, max_completion_tokens=max_tokens,
            extra_body={"skip_special_tokens": skip_special_tokens, "mm_processor_kwargs": mm})
        return model, r


def test_paddlex_request_equals_infer_and_transformers(paddle):
    from transformers import AutoTokenizer
    server, want = paddle["server"], paddle["want"]
    mn, mx = paddle["pixels"]
    model, r = asyncio.run(paddlex_request(server.url, paddle["url"], "OCR:", N, {"min_pixels": mn, "max_pixels": mx}))
    assert model == "paddleocr-vl"
    assert want["token_ids"] == paddle["ref"]  # infer == transformers, token by token
    tok = AutoTokenizer.from_pretrained(server.state.pipe.model_dir)
    assert r.choices[0].message.content == want["text"] == tok.decode(paddle["ref"], skip_special_tokens=True)
    assert r.choices[0].finish_reason == ("stop" if want["finish_reason"] == "stop" else "length")
    assert r.usage.completion_tokens == len(want["token_ids"])
    assert r.usage.prompt_tokens == want["timings"]["prompt_tokens"]


def test_paddlex_spotting_request_gets_its_pixel_bounds_and_special_tokens(paddle):
    """PaddleOCR-VL-1.5's spotting request as PaddleX 3.4 sends it: 112,896..1,605,632 pixels, above the
    checkpoint's own max_pixels (the server's ceiling is the largest task bound), and the answer with its special
    tokens. Before the ceiling was raised, the server clamped it to the checkpoint's bounds (fewer prompt tokens)."""
    server, want = paddle["server"], paddle["spotting"]
    _, r = asyncio.run(paddlex_request(server.url, paddle["url"], "Spotting:", N,
                                       {"min_pixels": 112896, "max_pixels": 1605632}, skip_special_tokens=False))
    assert r.usage.prompt_tokens == want["timings"]["prompt_tokens"] > 112896 // 28 ** 2
    assert r.choices[0].message.content == want["raw"]
    assert r.usage.completion_tokens == len(want["token_ids"])


def test_mm_processor_kwargs_and_ngram_xargs_change_the_answer(paddle):
    server, client = paddle["server"], paddle["server"].client()
    _, r = asyncio.run(paddlex_request(server.url, paddle["url"], "OCR:", N, {"max_pixels": paddle["small"]}))
    assert r.usage.prompt_tokens == paddle["smaller"]["timings"]["prompt_tokens"] < paddle["want"]["timings"]["prompt_tokens"]
    assert r.choices[0].message.content == paddle["smaller"]["text"]
    r = client.chat.completions.create(model="paddleocr-vl", messages=paddlex_messages(paddle["url"], "OCR:"),
                                       max_tokens=NGRAM_TOKENS, temperature=0, extra_body={"vllm_xargs": {"ngram_size": 1}})
    plain = paddle["plain"]["token_ids"]
    assert len(set(plain)) < len(plain)  # the fixture repeats tokens without the guard
    assert len(set(paddle["ngram"]["token_ids"])) == len(paddle["ngram"]["token_ids"])
    assert r.choices[0].message.content == paddle["ngram"]["text"]


def test_stop_strings_cut_the_answer(paddle):
    want = paddle["want"]["text"]
    stop = want[len(want) // 2: len(want) // 2 + 2]
    client = paddle["server"].client()
    r = client.chat.completions.create(model="paddleocr-vl", messages=paddlex_messages(paddle["url"], "OCR:"),
                                       max_tokens=N, temperature=0, stop=[stop])
    assert r.choices[0].message.content == want[:want.index(stop)]
    assert r.choices[0].finish_reason == "stop"


@pytest.fixture(scope="module")
def hunyuan(hunyuan_checkpoint, graph_mode):
    from ms_ocr.models.hunyuan_vl import SPEC as hunyuan_vl
    from tests.helpers.tiny_hunyuan import reference_greedy
    folder = hunyuan_checkpoint("hub")  # v1.0's layout: infer prompts it with an empty system message
    pipe = hunyuan_vl.load(folder, "CPU", "auto", Buckets(prefill=32, slots=64))
    img = page(128, 96, 7)
    prompt = hunyuan_vl.tasks["ocr"]
    want = pipe.run([img], prompt, SamplingConfig(max_new_tokens=N))
    ref = reference_greedy(folder, [img], prompt, N, system="")
    server = LiveServer(pipe, "hunyuan-ocr", "--max-model-len", "2048", "--max-num-seqs", "2",
                        "--served-model-name", "tencent/HunyuanOCR")
    yield dict(server=server, url=png_url(img), prompt=prompt, want=want, ref=ref, pipe=pipe)
    server.close()


def hunyuan_messages(url, prompt):
    """HunyuanOCR's vLLM client: an empty system message, then the image and the prompt."""
    return [{"role": "system", "content": ""},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": prompt}]}]


def test_hunyuan_streamed_request_equals_infer_and_transformers(hunyuan):
    server, want, pipe = hunyuan["server"], hunyuan["want"], hunyuan["pipe"]
    assert want["token_ids"] == hunyuan["ref"]
    stream = server.client().chat.completions.create(
        model="tencent/HunyuanOCR", messages=hunyuan_messages(hunyuan["url"], hunyuan["prompt"]), temperature=0,
        max_tokens=N, stream=True, stream_options={"include_usage": True},
        extra_body={"top_k": 1, "repetition_penalty": 1.0})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == streamed_text(pipe.processor.tokenizer, want["token_ids"], pipe.eos_ids)
    assert finish == [want["finish_reason"]]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(want["token_ids"])
    r = server.client().chat.completions.create(model="tencent/HunyuanOCR", temperature=0, max_tokens=N,
                                                messages=hunyuan_messages(hunyuan["url"], hunyuan["prompt"]))
    assert r.choices[0].message.content == want["text"]


def test_hunyuan_client_abandoning_its_stream_frees_the_slot(hunyuan):
    server = hunyuan["server"]
    before = metric(server.metrics(), "ms_ocr:generation_tokens_total")
    budget = 1900
    stream = server.client().chat.completions.create(
        model="tencent/HunyuanOCR", messages=hunyuan_messages(hunyuan["url"], hunyuan["prompt"]), temperature=0,
        max_tokens=budget, stream=True, extra_body={"ignore_eos": True})  # only the abandonment can end it early
    got = 0
    for chunk in stream:
        got += bool(chunk.choices and chunk.choices[0].delta.content)
        if got == 3:
            break
    stream.close()  # what HunyuanOCR's client does when it sees a repetition loop
    deadline = time.monotonic() + 20
    while metric(server.metrics(), "ms_ocr:num_requests_running") or server.worker.counts()[1]:
        assert time.monotonic() < deadline, "the abandoned request kept its slot"
        time.sleep(0.05)
    generated = metric(server.metrics(), "ms_ocr:generation_tokens_total") - before
    assert 3 <= generated < budget
    r = server.client().chat.completions.create(model="tencent/HunyuanOCR", temperature=0, max_tokens=N,
                                                messages=hunyuan_messages(hunyuan["url"], hunyuan["prompt"]))
    assert r.choices[0].message.content == hunyuan["want"]["text"]


def test_deepseek_ocr_request_with_vllm_xargs(tmp_path_factory, graph_mode):
    from PIL import Image

    from ms_ocr.models.deepseek_ocr import SPEC as deepseek_ocr
    from tests.helpers.golden_v1 import golden, make_v1_checkpoint
    from tests.models.deepseek.test_v1_end_to_end import reference_tokens
    folder, text, head = make_v1_checkpoint(str(tmp_path_factory.mktemp("ds1_serve")))
    img = Image.fromarray(golden()["in.base_global"][0].transpose(1, 2, 0))
    pipe = deepseek_ocr.load(folder, "CPU", "auto", Buckets(prefill=32, slots=64))
    pipe.processor.set_mode("base")
    tok = pipe.processor.tokenizer
    td = [tok.token_to_id("<td>"), tok.token_to_id("</td>")]
    n = 10  # reference_tokens' length
    want = pipe.run([img], "Free OCR.", SamplingConfig(max_new_tokens=n, no_repeat_ngram_size=30, no_repeat_window=90,
                                                       no_repeat_exempt=tuple(td)))
    ref = reference_tokens(folder, text, head, "Free OCR.")
    assert want["token_ids"] == ref[:len(want["token_ids"])]
    server = LiveServer(pipe, "deepseek-ocr", "--max-model-len", "1024", "--max-num-seqs", "2", "--no-warmup")
    try:
        r = server.client().chat.completions.create(
            model="deepseek-ocr", max_tokens=n, temperature=0.0,
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": png_url(img)}},
                                                   {"type": "text", "text": "Free OCR."}]}],
            extra_body={"skip_special_tokens": False,
                        "vllm_xargs": {"ngram_size": 30, "window_size": 90, "whitelist_token_ids": td}})
    finally:
        server.close()
    ids = [t for t in want["token_ids"] if t not in pipe.eos_ids]
    assert r.choices[0].message.content == tok.decode(ids, skip_special_tokens=False)
    assert r.usage.completion_tokens == len(want["token_ids"])


def test_deepseek_ocr2_concurrent_requests_equal_transformers(tmp_path_factory, graph_mode):
    """DeepSeek-OCR-2 (MoE decoder) through the server: two requests at once with different budgets, so decode
    steps run both sequences (batched MoE) and then the one left (host-routed experts on the first cache row);
    each answer's tokens equal transformers' generate."""
    import numpy as np
    from PIL import Image

    from ms_ocr.models.deepseek_ocr2 import SPEC as deepseek_ocr2
    from tests.helpers.tiny_deepseek import make_tiny_checkpoint, reference_greedy
    folder = make_tiny_checkpoint(str(tmp_path_factory.mktemp("ds2_serve")))
    pipe = deepseek_ocr2.load(folder, "CPU", "auto", Buckets(prefill=32, slots=64))
    rng = np.random.default_rng(8)
    imgs = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in ((300, 200), (640, 200))]
    budgets = [10, 4]
    want = [reference_greedy(folder, [img], "Free OCR.", n) for img, n in zip(imgs, budgets)]
    server = LiveServer(pipe, "deepseek-ocr2", "--max-model-len", "1536", "--max-num-seqs", "2", "--no-warmup")

    async def ask():
        from openai import AsyncOpenAI
        async with AsyncOpenAI(base_url=server.url + "/v1", api_key="EMPTY", max_retries=0, timeout=600) as client:
            return await asyncio.gather(*[client.chat.completions.create(
                model="deepseek-ocr2", max_tokens=n, temperature=0.0, extra_body={"skip_special_tokens": False},
                messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": png_url(img)}},
                                                       {"type": "text", "text": "Free OCR."}]}])
                for img, n in zip(imgs, budgets)])
    try:
        got = asyncio.run(ask())
        text = server.metrics()
    finally:
        server.close()
    tok = pipe.processor.tokenizer
    for r, ids, n in zip(got, want, budgets):
        ids = ids[:n]
        assert r.usage.completion_tokens == len(ids)
        kept = [t for t in ids if t not in pipe.eos_ids]
        assert r.choices[0].message.content == tok.decode(kept, skip_special_tokens=False)
    assert metric(text, "ms_ocr:decode_steps_total", running=2) > 0
    assert metric(text, "ms_ocr:decode_step_rows_total", rows=1) > 0


def test_answers_carry_the_models_post_processing_as_infer_prints_it(hunyuan, monkeypatch):
    """The engine ran the model's post-processing (HunyuanOCR's repeat clean-up) and the server threw it away,
    answering the raw decode; now a whole answer is infer's text, and skip_postprocess asks for the raw one."""
    server, pipe, want = hunyuan["server"], hunyuan["pipe"], hunyuan["want"]
    real = pipe.postprocess
    monkeypatch.setattr(pipe, "postprocess", lambda text, task, images: ("<cleaned>" + real(text, task, images)[0], {}))
    ask = dict(model="tencent/HunyuanOCR", temperature=0, max_tokens=N,
               messages=hunyuan_messages(hunyuan["url"], hunyuan["prompt"]))
    r = server.client().chat.completions.create(**ask)
    assert r.choices[0].message.content == "<cleaned>" + want["text"]
    raw = server.client().chat.completions.create(**ask, extra_body={"skip_postprocess": True})
    assert raw.choices[0].message.content == pipe.processor.tokenizer.decode(
        [t for t in want["token_ids"] if t not in pipe.eos_ids], True)
