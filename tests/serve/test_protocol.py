"""Host-side pieces of the server without a model: incremental detokenisation and stop strings, the chat
messages -> (system, prompt, images) reading, the per-request sampling settings."""

import pytest

from ms_ocr.processing.tokenizer import Tokenizer
from ms_ocr.serve.app import sampling_for
from ms_ocr.serve.protocol import ApiError, parse_chat_request, read_messages
from ms_ocr.textstream import TextStream

TEXT = "Invoice 2026-11-24: total 1,234.50 EUR — paid. Ünïcödé 数字 ✓ and emoji 🙂 end."


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    return Tokenizer.from_dir(tiny_dir)


def run_stream(tok, ids, stops=(), eos=(2,)):
    s = TextStream(tok, True, eos, stops)
    out, stopped = [], False
    for t in ids:
        stopped = s.add(t)
        out.append(s.pending())
        if stopped:
            break
    out.append(s.pending(final=True))
    return out, s, stopped


def test_stream_concatenates_to_the_whole_decode(tokenizer):
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    assert len(ids) > 30 and tokenizer.decode(ids) == TEXT  # byte-fallback pieces for the non-ASCII characters
    parts, s, _ = run_stream(tokenizer, ids + [2])
    assert "".join(parts) == TEXT == s.final_text()
    assert sum(1 for p in parts if p) > 10  # it really streamed


@pytest.mark.parametrize("stop", ["total", "EUR", "🙂", "end."])
def test_stop_string_cuts_before_it_and_is_never_sent(tokenizer, stop):
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    parts, s, stopped = run_stream(tokenizer, ids, stops=[stop, "never there"])
    assert stopped and s.final_text() == TEXT[:TEXT.index(stop)]
    assert "".join(parts) == TEXT[:TEXT.index(stop)]


def test_messages_become_system_prompt_and_images():
    req = parse_chat_request({"messages": [
        {"role": "system", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "image_url", "image_url": {"url": "u1"}},
                                     {"type": "text", "text": "second"}]},
        {"role": "user", "content": "third"}]})
    conv = read_messages(req.messages)
    assert (conv.system, conv.prompt, conv.image_urls) == ("", "first\nsecond\nthird", ["u1"])
    conv = read_messages(parse_chat_request({"messages": [{"role": "user", "content": "x"}]}).messages)
    assert conv.system is None
    with pytest.raises(ApiError, match="role 'assistant'"):
        read_messages(parse_chat_request({"messages": [{"role": "assistant", "content": "x"}]}).messages)
    with pytest.raises(ApiError, match="no user text or image"):
        read_messages(parse_chat_request({"messages": [{"role": "user", "content": []}]}).messages)


def test_sampling_fields_map_onto_the_sampling_config():
    req = parse_chat_request({"messages": [{"role": "user", "content": "x"}], "temperature": 0.7, "top_p": 0.9,
                              "top_k": -1, "seed": 5, "repetition_penalty": 1.1, "stop": "END",
                              "vllm_xargs": {"ngram_size": 30, "window_size": 90, "whitelist_token_ids": [7, 8]}})
    cfg = sampling_for(req, 100)
    assert (cfg.max_new_tokens, cfg.temperature, cfg.top_p, cfg.top_k, cfg.seed, cfg.repetition_penalty) == \
        (100, 0.7, 0.9, 0, 5, 1.1)
    assert (cfg.no_repeat_ngram_size, cfg.no_repeat_window, cfg.no_repeat_exempt) == (30, 90, (7, 8))
    assert req.stop == ["END"]
    greedy = sampling_for(parse_chat_request({"messages": [{"role": "user", "content": "x"}]}), 3)
    assert (greedy.temperature, greedy.top_k, greedy.no_repeat_ngram_size) == (0.0, 0, 0)
