"""Unlimited-OCR's KV cache holds the prompt and a ring of `sliding_window` slots, not the answer: its size does not
depend on the answer's length, the ring wraps many times with transformers' tokens, and over a 4,000-token answer
neither the cache nor the process's resident memory grows once the decode graph is compiled."""

import pytest

from bench import tiny_unlimited as tu
from bench.pages import text_page

PROMPT = "document parsing."


@pytest.fixture(scope="module")
def pipe(tmp_path_factory, graph_mode):
    from ms_ocr import models
    folder = tu.make_checkpoint(str(tmp_path_factory.mktemp("unlimited")))
    return models.get("unlimited-ocr").load(folder, "CPU", "fp32", mode="base")


def _run(pipe, n, on_token=None):
    from ms_ocr.engine import BatchEngine, Request
    from ms_ocr.generate import SamplingConfig
    engine = BatchEngine(pipe, SamplingConfig(max_new_tokens=n), max_batch_size=1, max_input_length=128,
                         max_output_length=n, ignore_eos=True)
    out = []
    engine.run([Request("a", [text_page(300, 200, "12.50 EUR").convert("RGB")], PROMPT, ignore_eos=True,
                        on_token=on_token)], lambda r, res, e: out.append((res, e)))
    (res, err), = out
    assert err is None, err
    return res["token_ids"], engine


def test_cache_size_does_not_depend_on_the_answer_length(pipe):
    rt = pipe.runtime
    p = 32  # the prompt's tokens
    assert rt.plan_slots(p, 10) == rt.plan_slots(p, 4000) == rt.plan_slots(p, 8000) == 256
    with pytest.raises(ValueError, match="max_position_embeddings"):  # positions stay absolute: rope's limit holds
        rt.plan_slots(p, 8192)
    rt.window, window = None, rt.window  # the same runtime with the cache of full attention
    try:
        assert rt.plan_slots(p, 4000) == 4096
    finally:
        rt.window = window


def test_the_ring_wraps_with_transformers_tokens(pipe):
    """200 tokens through a ring of 8 slots (25 wraps): transformers' greedy tokens, the cache never resized."""
    import torch
    torch.set_num_threads(1)
    img = text_page(300, 200, "12.50 EUR").convert("RGB")
    want, _ = tu.reference_generate(tu.tiny_model(), tu.reference_inputs(pipe.processor([img], PROMPT)), 200)
    got, engine = _run(pipe, 200)
    assert got == want
    assert pipe.runtime.model.text_layers()[0].self_attn.k_cache.shape[2] == engine.slots == 256


def test_memory_is_flat_over_a_4000_token_answer(pipe):
    """Resident memory after the first 100 tokens (the decode graph compiled) and the cache's size, every 500 tokens
    up to 4,000: the cache keeps its 256 slots and the process grows by less than 2 MB (a full-attention cache would
    add 1.5 KB a token here, 6 MB over the answer; the README has a larger decoder's numbers)."""
    from ms_ocr.proc import rss_gb
    rt = pipe.runtime
    seen = []

    def on_token(tok):
        if len(seen) == 0 or (len(seen) + 1) % 500 == 0 or len(seen) == 99:
            cache = rt.model.text_layers()[0].self_attn.k_cache
            seen.append((rss_gb(), tuple(cache.shape)))
        else:
            seen.append(None)
        return False

    got, engine = _run(pipe, 4000, on_token)
    assert len(got) == 4000
    marks = [m for m in seen[99:] if m is not None]
    assert len(marks) == 9 and {shape for _, shape in marks} == {(1, 4, 256, 16)}
    assert (marks[-1][0] - marks[0][0]) * 1024 < 2.0, [round(r * 1024, 1) for r, _ in marks]
    kv_per_token = rt.cache_bytes(1, 1)  # k and v of every layer, one position
    assert kv_per_token == 2 * 3 * 4 * 16 * 4 == 1536
