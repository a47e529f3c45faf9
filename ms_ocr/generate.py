"""Sampling on the host: the settings of a request and how the next token is chosen from its logits (the loop that
prefills and decodes is ms_ocr/engine.py's)."""

from dataclasses import dataclass

import numpy as np


@dataclass
class SamplingConfig:
    max_new_tokens: int = 1024
    temperature: float = 0.0          # 0 -> greedy
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    no_repeat_window: int = 0         # 0 -> whole sequence
    no_repeat_exempt: tuple = ()      # token ids whose n-grams are never banned
    seed: int = None
    stop_rules: tuple = ()            # ms_ocr.stop_rules rules (e.g. TailRepetition), checked after every token

    def validate(self):
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if not self.repetition_penalty > 0 or not np.isfinite(self.repetition_penalty):
            raise ValueError("repetition_penalty must be a finite number > 0")
        if not np.isfinite(self.temperature):
            raise ValueError("temperature must be a finite number")
        if self.no_repeat_ngram_size < 0 or self.no_repeat_window < 0:
            raise ValueError("no_repeat_ngram_size and no_repeat_window must be >= 0")
        if self.seed is not None and not 0 <= self.seed < 2 ** 64:
            raise ValueError(f"seed must be in 0..2**64-1, not {self.seed}")


def model_sampling(spec, tokenizer, max_new_tokens=1024, temperature=0.0, top_p=1.0, top_k=0,
                   repetition_penalty=None, no_repeat_ngram=None, seed=None, early_stop=True):
    """A validated SamplingConfig (ValueError if not) for a model (its ModelSpec, of the checkpoint's version):
    no_repeat_ngram None takes the model's default n-gram blocking (spec.no_repeat, its exempt tokens looked up in
    `tokenizer`), 0 turns it off; repetition_penalty None takes the model's (spec.repetition_penalty); early_stop
    False leaves out the model's stop rules (spec.stop_rules)."""
    ngram, window, exempt = no_repeat_ngram or 0, 0, ()
    default = spec.no_repeat
    if no_repeat_ngram is None and default:
        ngram, window = default["size"], default["window"]
        exempt = tuple(i for i in (tokenizer.token_to_id(t) for t in default["exempt_tokens"]) if i is not None)
    penalty = spec.repetition_penalty if repetition_penalty is None else repetition_penalty
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                              repetition_penalty=penalty, no_repeat_ngram_size=ngram,
                              no_repeat_window=window, no_repeat_exempt=exempt, seed=seed,
                              stop_rules=tuple(spec.stop_rules) if early_stop else ())
    sampling.validate()
    return sampling


def apply_repetition_penalty(logits, previous_ids, penalty):
    """HF RepetitionPenaltyLogitsProcessor: scores of seen tokens divided (positive) or multiplied."""
    if penalty == 1.0 or len(previous_ids) == 0:
        return logits
    ids = np.unique(np.asarray(previous_ids))
    scores = logits[ids]
    with np.errstate(over="ignore", under="ignore"):  # a huge penalty saturates at -inf / 0: still an order
        logits[ids] = np.where(scores < 0, scores * penalty, scores / penalty)
    return logits


def banned_ngram_tokens(ids, n, window=0, exempt=()):
    """Tokens that would repeat an n-gram already present (within the last `window` tokens if set)."""
    if n <= 0 or len(ids) < n:
        return []
    seq = list(ids[-window:]) if window else list(ids)
    prefix = tuple(ids[len(ids) - n + 1:]) if n > 1 else ()
    banned = set()
    for i in range(len(seq) - n + 1):
        if tuple(seq[i:i + n - 1]) == prefix:
            banned.add(seq[i + n - 1])
    return sorted(banned - set(exempt))


def sample_token(logits, cfg, rng):
    """Greedy argmax, or HF-order warpers (temperature -> top-k -> top-p) then a draw."""
    if cfg.temperature == 0:
        return int(np.argmax(logits))
    logits = logits.astype(np.float64)
    # (x - max) / T, not x / T - max(x / T): the same softmax, but a tiny temperature (1e-300) gives -inf and 0
    # (the greedy choice) instead of inf - inf = NaN
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        logits = (logits - logits.max()) / cfg.temperature
    if cfg.top_k and cfg.top_k < logits.shape[0]:
        kth = np.partition(logits, -cfg.top_k)[-cfg.top_k]
        logits = np.where(logits < kth, -np.inf, logits)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    if cfg.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cum = np.cumsum(probs[order])
        # keep the smallest prefix whose mass reaches top_p (always at least one token)
        keep = order[: int(np.searchsorted(cum, cfg.top_p) + 1)]
        mask = np.zeros_like(probs, bool)
        mask[keep] = True
        probs = np.where(mask, probs, 0.0)
        probs /= probs.sum()
    return int(rng.choice(probs.shape[0], p=probs))


def next_token(logits, history, generated, cfg, rng):
    logits = np.array(logits, np.float32, copy=True)
    logits = apply_repetition_penalty(logits, history, cfg.repetition_penalty)
    banned = banned_ngram_tokens(generated, cfg.no_repeat_ngram_size, cfg.no_repeat_window,
                                 cfg.no_repeat_exempt)
    if banned:
        logits[banned] = -np.inf
    return sample_token(logits, cfg, rng)
