"""Continuous batching (ms_ocr.engine) equals single-request generation: greedy tokens equal transformers'
generate for every page of a batch, and every batched decode step's logits equal an uncached forward of the
same sequence alone, for PaddleOCR-VL (MRoPE), HunyuanOCR (XD-RoPE, q/k norm) and DeepSeek-OCR-2 (MoE)."""

import numpy as np
import pytest
from PIL import Image

from ms_ocr.engine import BatchEngine, Request
from ms_ocr.generate import SamplingConfig
from ms_ocr.runtime import Buckets, Prepared
from bench.pages import page
from tests.helpers.parity import rel_err

TOL = 1e-4
NEW_TOKENS = 10


def _run(pipe, pages, prompt, batch, max_new, max_input=512, engine_out=None):
    """Results by key, in completion order, with per-step logits dumped (engine_out: a list the engine is
    appended to)."""
    engine = BatchEngine(pipe, SamplingConfig(max_new_tokens=NEW_TOKENS), batch, max_input, NEW_TOKENS)
    done, order = {}, []

    def on_result(req, result, error):
        assert error is None, error
        done[req.key] = result
        order.append(req.key)

    reqs = [Request(str(i), [img], prompt, sampling=SamplingConfig(max_new_tokens=m), dump=True)
            for i, (img, m) in enumerate(zip(pages, max_new))]
    engine.run(reqs, on_result)
    if engine_out is not None:
        engine_out.append(engine)
    return done, order


def _uncached_logits(pipe, image, prompt, tokens):
    """Logits of prompt + tokens[:-1] in one uncached forward of the sequence alone: rows for each new token."""
    prep, _ = pipe.prepare([image], prompt)
    s, n = prep.input_ids.shape[0], len(tokens) - 1
    tail = np.arange(s, s + n) + prep.rope_delta
    full = Prepared(input_ids=np.concatenate([prep.input_ids, tokens[:-1]]).astype(np.int64),
                    position_ids=np.concatenate([prep.position_ids, np.broadcast_to(tail, (prep.position_ids.shape[0], n))],
                                                1),
                    rope_delta=prep.rope_delta,
                    image_token_mask=np.concatenate([prep.image_token_mask, np.zeros(n, bool)]),
                    vision_inputs=prep.vision_inputs)
    return pipe.runtime.full_logits(full, pipe.encode_images(prep))[s - 1:]


def _check(pipe, pages, prompt, want, batch, max_input=512):
    # different output budgets: sequences stop at different steps and freed slots are refilled
    max_new = [NEW_TOKENS - 2 * (i % 3) for i in range(len(pages))]
    engines = []
    done, order = _run(pipe, pages, prompt, batch, max_new, max_input, engines)
    # the tail of the run decoded fewer rows than the cache holds (running sequences moved to the first rows)
    rows = engines[0].step_rows
    assert sum(rows.values()) == sum(engines[0].step_sizes.values())
    assert min(rows) < batch, rows
    assert sorted(done) == [str(i) for i in range(len(pages))]
    for i, page in enumerate(pages):
        got = done[str(i)]
        expect = want[i][:max_new[i]]
        if pipe.eos_ids[0] in expect:
            expect = expect[:expect.index(pipe.eos_ids[0]) + 1]
        assert got["token_ids"] == expect, f"page {i}"
        steps = got["dump"]["logits"]
        ref = _uncached_logits(pipe, page, prompt, got["token_ids"])
        assert steps.shape == ref.shape
        assert rel_err(steps, ref) < TOL, f"page {i}"
        top2 = np.sort(ref, -1)[:, -2:]
        # the fixture is one where identical tokens are required: the top-2 margin exceeds the tolerance
        assert np.all(top2[:, 1] - top2[:, 0] > TOL * np.abs(ref).max(-1)), f"page {i}"
    return order


# (width, height): 3:4 page, wide strip, tall strip, square, tiny
PAGES = [(96, 128), (200, 56), (48, 160), (112, 112), (30, 20)]


@pytest.fixture(scope="module")
def paddle(tiny_dir, graph_mode):
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    return paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64))


def test_paddleocr_vl_batched_equals_single(paddle, tiny_dir):
    from ms_ocr.config_utils import load_config_json
    from ms_ocr.models.paddleocr_vl.config import PaddleOCRVLConfig
    from tests.helpers.reference import reference_greedy
    cfg = PaddleOCRVLConfig.from_dict(load_config_json(tiny_dir))
    pages = [page(w, h, i) for i, (w, h) in enumerate(PAGES)]
    want = [reference_greedy(tiny_dir, cfg, [p], "OCR:", NEW_TOKENS) for p in pages]
    order = _check(paddle, pages, "OCR:", want, batch=3)
    assert order != sorted(order, key=int)  # a shorter budget admitted later finished earlier
    # single-slot engine and the plain single-request path give the same tokens
    single, _ = _run(paddle, pages[:2], "OCR:", 1, [NEW_TOKENS] * 2)
    for i in range(2):
        plain = paddle.run([pages[i]], "OCR:", SamplingConfig(max_new_tokens=NEW_TOKENS))
        assert single[str(i)]["token_ids"] == plain["token_ids"] == want[i]
    # one request in a 4-slot engine decodes one row per step (not four), with the same tokens
    engines = []
    lone, _ = _run(paddle, pages[3:4], "OCR:", 4, [NEW_TOKENS], engine_out=engines)
    assert lone["0"]["token_ids"] == want[3]
    assert engines[0].step_rows == {1: len(lone["0"]["token_ids"]) - 1}
    # the prompt's embedding step is compiled per bucket of image rows (zero rows no token selects), not per image
    # size: a line reader compiled one for each line width
    rt = paddle.runtime
    rows = {key[3][0][0] for key in rt.compiler._phases if key[1] == id(rt.prefill_prep_step)}
    assert rows and all(r % rt.buckets.prefill == 0 for r in rows), rows


def test_group_prefill_runs_in_power_of_two_chunks_with_each_prompts_logits(paddle):
    """A group of 7 prompts of different lengths prefills as chunks of 4, 2 and 1 prompts (longest first), so a
    server's groups of 1-8 compile four prefill shapes a bucket instead of eight; every prompt's last-token
    logits are those of its prefill alone, in the group's order, and its cache rows decode as alone."""
    rt = paddle.runtime
    sizes = [(30, 20), (96, 128), (48, 160), (200, 56), (112, 112), (64, 64), (40, 90)]
    preps = [paddle.prepare([page(w, h, 30 + i)], "OCR:")[0] for i, (w, h) in enumerate(sizes)]
    lengths = [p.input_ids.shape[0] for p in preps]
    assert len(set(lengths)) >= 5, lengths
    feats = [paddle.encode_images(p) for p in preps]
    slots = max(rt.plan_slots(n, 4) for n in lengths)
    alone = []
    for prep, f in zip(preps, feats):
        rt.reset_cache(1, slots)
        logits = rt.prefill_batch([prep], [f], [0], slots).asnumpy()[0]
        step = rt.decode_batch([int(np.argmax(logits))], np.array([prep.input_ids.shape[0]]), [prep.rope_delta],
                               paddle.num_pos_axes).asnumpy()[0]
        alone.append((logits, step))
    calls = []
    original = rt.compiler.call

    def call(name, cell, *args):
        if cell is rt.last_logits_step:
            calls.append(int(args[0].shape[0]))
        return original(name, cell, *args)
    rt.compiler.call = call
    try:
        rt.reset_cache(len(preps), slots)
        group = rt.prefill_batch(preps, feats, list(range(len(preps))), slots).asnumpy()
    finally:
        rt.compiler.call = original
    assert calls == [4, 2, 1]
    steps = rt.decode_batch([int(np.argmax(row)) for row in group], np.array(lengths),
                            [p.rope_delta for p in preps], paddle.num_pos_axes).asnumpy()
    for i, (logits, step) in enumerate(alone):
        assert rel_err(group[i], logits) < 1e-5, i
        assert rel_err(steps[i], step) < 1e-5, i


def test_hunyuan_batched_equals_single(hunyuan_checkpoint, graph_mode):
    from ms_ocr.models.hunyuan_vl import SPEC as hunyuan_vl
    from tests.helpers.tiny_hunyuan import reference_greedy
    folder = hunyuan_checkpoint()
    pipe = hunyuan_vl.load(folder, "CPU", "auto", Buckets(prefill=32, slots=64))
    pages = [page(w, h, 10 + i) for i, (w, h) in enumerate(PAGES[:4])]
    prompt = "提取图中的文字。"
    want = [reference_greedy(folder, [p], prompt, NEW_TOKENS) for p in pages]
    _check(pipe, pages, prompt, want, batch=2)


@pytest.mark.slow  # the default run batches DeepSeek-OCR-2's MoE decode against transformers through the server
# (tests/serve/test_clients.py::test_deepseek_ocr2_concurrent_requests_equal_transformers)
def test_deepseek_ocr2_moe_batched_equals_single(tmp_path_factory, graph_mode):
    from ms_ocr.models.deepseek_ocr2 import SPEC as deepseek_ocr2
    from tests.helpers.tiny_deepseek import make_tiny_checkpoint, reference_greedy
    folder = make_tiny_checkpoint(str(tmp_path_factory.mktemp("ds2_engine")))
    pipe = deepseek_ocr2.load(folder, "CPU", "auto", Buckets(prefill=32, slots=64))
    rng = np.random.default_rng(5)
    pages = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in ((300, 200), (200, 300),
                                                                                           (640, 200))]
    want = [reference_greedy(folder, [p], "Free OCR.", NEW_TOKENS) for p in pages]
    _check(pipe, pages, "Free OCR.", want, batch=2, max_input=1536)


def test_engine_reports_bad_requests_and_goes_on(paddle):
    engine = BatchEngine(paddle, SamplingConfig(max_new_tokens=4), 2, max_input_length=40, max_output_length=4)
    got = {}
    reqs = [Request("ok", [page(20, 20, 3)], "OCR:"), Request("long", [page(300, 300, 1)], "OCR:")]
    engine.run(reqs, lambda r, res, err: got.__setitem__(r.key, (res, err)))
    assert got["ok"][1] is None and len(got["ok"][0]["token_ids"]) == 4
    assert got["long"][0] is None and "exceeds --max-input-length 40" in str(got["long"][1])
    with pytest.raises(ValueError, match="max_position_embeddings"):
        BatchEngine(paddle, SamplingConfig(), 2, max_input_length=10 ** 6, max_output_length=4)


def test_bf16_kv_cache_batched_equals_single(tiny_dir, graph_mode):
    """--kv-cache-dtype bf16 through the engine: the caches really are bf16 (a bf16 set_data into the fp32 cache
    Parameter once left them fp32), and sequences decoded together, with finished ones' rows refilled and moved,
    give the tokens and per-step logits of each request decoded alone over its own bf16 cache."""
    import mindspore as ms
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    pipe = paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64), kv_cache_dtype="bf16")
    pages = [page(w, h, 20 + i) for i, (w, h) in enumerate(PAGES[:4])]
    alone = []
    for p in pages:
        steps = []
        result = pipe.run([p], "OCR:", SamplingConfig(max_new_tokens=NEW_TOKENS), on_logits=steps.append)
        alone.append((result["token_ids"], np.stack(steps)))
    caches = [c for layer in pipe.runtime.model.text_layers() for c in (layer.self_attn.k_cache,
                                                                         layer.self_attn.v_cache)]
    assert all(c.dtype == ms.bfloat16 and c.asnumpy().dtype.itemsize == 2 for c in caches)
    max_new = [NEW_TOKENS - 2 * (i % 3) for i in range(len(pages))]
    engines = []
    done, _ = _run(pipe, pages, "OCR:", 3, max_new, engine_out=engines)
    assert min(engines[0].step_rows) < 3
    for i in range(len(pages)):
        got, (tokens, logits) = done[str(i)], alone[i]
        n = len(got["token_ids"])
        assert n == min(max_new[i], len(tokens)) and got["token_ids"] == tokens[:n]
        assert rel_err(got["dump"]["logits"], logits[:n]) < TOL
