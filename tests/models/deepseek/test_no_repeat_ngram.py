"""DeepSeek-OCR's default no-repeat n-gram filter (ModelSpec no_repeat: 30-grams within 90 tokens, <td> / </td>
exempt) against the official code's numbers: tests/data/deepseek_ocr_v1/ngram.json / ngram.npz hold twelve cases
of deepseek-ai/DeepSeek-OCR's process/ngram_norepeat.NoRepeatNGramLogitsProcessor (its input ids, n-gram size,
window, whitelist and the tokens it banned), the README's image, PDF and eval scripts' settings among them."""

import json
import os

import numpy as np
import pytest

from ms_ocr.generate import SamplingConfig, banned_ngram_tokens, model_sampling, next_token

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "deepseek_ocr_v1")
CASES = json.load(open(os.path.join(DATA, "ngram.json")))["cases"]
IDS = np.load(os.path.join(DATA, "ngram.npz"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_banned_tokens_equal_the_official_processors(name):
    case = CASES[name]
    ids = IDS[f"{name}.input_ids"].tolist()
    assert len(ids) == case["len"]
    got = banned_ngram_tokens(ids, case["ngram_size"], case["window_size"], case["whitelist_token_ids"] or ())
    assert got == sorted(IDS[f"{name}.banned"].tolist()) == sorted(case["banned"])


class _Vocab:
    """The real checkpoint's ids of the two exempt tokens (the official scripts' whitelist)."""

    def token_to_id(self, token):
        return {"<td>": 128821, "</td>": 128822}.get(token)


def test_the_models_default_is_the_official_image_scripts_filter():
    from ms_ocr.models import get
    sampling = model_sampling(get("deepseek-ocr"), _Vocab())
    assert (sampling.no_repeat_ngram_size, sampling.no_repeat_window) == (30, 90)
    assert sampling.no_repeat_exempt == (128821, 128822)
    off = model_sampling(get("deepseek-ocr"), _Vocab(), no_repeat_ngram=0)
    assert off.no_repeat_ngram_size == 0


@pytest.mark.parametrize("name", ["image_script", "image_script_outside"])
def test_the_default_filter_bans_the_official_tokens_when_choosing(name):
    """The whole host step with the model's default settings: every banned token is -inf, so greedy picks the best
    allowed one; with nothing banned it picks the best overall."""
    from ms_ocr.models import get
    sampling = model_sampling(get("deepseek-ocr"), _Vocab())
    ids = IDS[f"{name}.input_ids"].tolist()
    banned = IDS[f"{name}.banned"].tolist()
    logits = np.zeros(128830, np.float32)
    logits[banned] = 10.0  # the banned tokens would win
    logits[3] = 5.0
    got = next_token(logits, ids, ids, sampling, np.random.default_rng(0))
    assert got == (3 if banned else int(np.argmax(logits)))
    assert next_token(logits, ids, ids, SamplingConfig(), np.random.default_rng(0)) == int(np.argmax(logits))
