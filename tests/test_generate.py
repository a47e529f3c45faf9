"""Logits processors and sampling against transformers' own processors/warpers."""

import numpy as np
import pytest
import torch

from ms_ocr.generate import (SamplingConfig, apply_repetition_penalty, banned_ngram_tokens, next_token,
                             sample_token)


def test_repetition_penalty_matches_transformers():
    from transformers import RepetitionPenaltyLogitsProcessor
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(50).astype(np.float32) * 3
    prev = [3, 7, 7, 11, 49]
    want = RepetitionPenaltyLogitsProcessor(1.3)(torch.tensor([prev]), torch.tensor(logits)[None])[0].numpy()
    got = apply_repetition_penalty(logits.copy(), prev, 1.3)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_no_repeat_ngram_matches_transformers():
    from transformers import NoRepeatNGramLogitsProcessor
    seq = [5, 6, 7, 5, 6, 8, 5, 6]
    scores = torch.zeros(1, 20)
    out = NoRepeatNGramLogitsProcessor(3)(torch.tensor([seq]), scores)[0]
    assert banned_ngram_tokens(seq, 3) == sorted(torch.nonzero(torch.isinf(out)).flatten().tolist()) == [7, 8]


def test_no_repeat_ngram_window_and_exempt():
    seq = [1, 2, 3] + [9] * 10 + [1, 2]
    assert banned_ngram_tokens(seq, 3) == [3]
    assert banned_ngram_tokens(seq, 3, window=6) == []       # the first "1 2 3" is out of the window
    assert banned_ngram_tokens(seq, 3, exempt=(3,)) == []


def test_greedy_is_argmax_and_sampling_is_seeded():
    logits = np.array([0.1, 2.0, 1.9, -1.0], np.float32)
    assert sample_token(logits, SamplingConfig(), np.random.default_rng(0)) == 1
    cfg = SamplingConfig(temperature=1.0, seed=5)
    a = [sample_token(logits, cfg, np.random.default_rng(5)) for _ in range(3)]
    b = [sample_token(logits, cfg, np.random.default_rng(5)) for _ in range(3)]
    assert a == b


def test_top_k_and_top_p_keep_the_same_tokens_as_transformers():
    from transformers import TopKLogitsWarper, TopPLogitsWarper
    rng = np.random.default_rng(1)
    logits = rng.standard_normal(40).astype(np.float32) * 2
    for cfg in (SamplingConfig(temperature=1.0, top_k=5), SamplingConfig(temperature=1.0, top_p=0.7)):
        t = torch.tensor(logits)[None]
        warped = TopKLogitsWarper(cfg.top_k)(None, t) if cfg.top_k else TopPLogitsWarper(cfg.top_p)(None, t)
        allowed = set(torch.nonzero(~torch.isinf(warped[0])).flatten().tolist())
        drawn = {sample_token(logits, cfg, np.random.default_rng(s)) for s in range(400)}
        assert drawn <= allowed and len(drawn) == len(allowed)


def test_banned_tokens_are_never_chosen():
    logits = np.array([0.0, 10.0, 1.0], np.float32)
    cfg = SamplingConfig(no_repeat_ngram_size=2)
    assert next_token(logits, [4, 1, 4], [4, 1, 4], cfg, np.random.default_rng(0)) == 2


@pytest.mark.parametrize("bad", [dict(max_new_tokens=0), dict(temperature=-1), dict(top_p=0), dict(top_k=-2),
                                 dict(repetition_penalty=0)])
def test_invalid_settings_are_rejected(bad):
    with pytest.raises(ValueError):
        SamplingConfig(**bad).validate()
