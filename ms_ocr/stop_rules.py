"""Stop rules: conditions on a sequence's decoded text that end it before eos or the token budget, as a model's
reference client applies them. A ModelSpec declares its rules (`stop_rules`), a request carries them in its
SamplingConfig, and the engine asks each rule after every token (BatchEngine._take_token), whatever the model.

A rule is a frozen dataclass (plain data: the specs stay importable without NumPy or MindSpore) with a `name` and
`start(tokenizer, eos_ids)`, which returns the watcher of one sequence: a callable that takes each new token id and
returns True to end the sequence there (finish_reason "stop").
"""

from dataclasses import dataclass
from typing import ClassVar


def tail_repeats(text, min_repeats, max_unit):
    """True when `text` ends in `min_repeats` back-to-back copies of one unit of 1..max_unit characters (units of
    whitespace only do not count). The units tried are bounded by len(text) // min_repeats."""
    n = len(text)
    if n < 2 * min_repeats:
        return False
    for size in range(1, min(max_unit, n // min_repeats) + 1):
        unit = text[n - size:]
        if not unit.strip():
            continue
        if all(text[n - size * (k + 1):n - size * k] == unit for k in range(1, min_repeats)):
            return True
    return False


@dataclass(frozen=True)
class TailRepetition:
    """End a sequence whose answer is stuck repeating a short unit (greedy decoding's degeneration).

    The answer's text (special tokens skipped) is checked once it reaches `first_check` characters, then each time
    it has grown by `check_every` more since the last check; a check looks at its last `window` characters for
    `min_repeats` copies of a unit of at most `max_unit` characters (tail_repeats). Checking at character
    thresholds, not every token, keeps the cost to a few thousand character comparisons per `check_every`
    characters."""

    name: ClassVar[str] = "tail_repetition"
    min_repeats: int = 8
    first_check: int = 4000
    check_every: int = 1000
    window: int = 8000
    max_unit: int = 256

    def __post_init__(self):
        if self.min_repeats < 2 or self.max_unit < 1 or self.first_check < 0 or self.check_every < 1 \
                or self.window < 1:
            raise ValueError(f"invalid {self}")

    def start(self, tokenizer, eos_ids):
        from ms_ocr.textstream import TextStream
        return _TailWatch(self, TextStream(tokenizer, True, eos_ids))


class _TailWatch:
    """One sequence's TailRepetition: the text grows token by token (incremental detokenisation)."""

    def __init__(self, rule, stream):
        self.rule, self.stream, self.next_check = rule, stream, rule.first_check

    def feed_text(self, text):
        """The check on the answer so far, `text` (what a token's arrival made it)."""
        if len(text) < self.next_check:
            return False
        self.next_check = len(text) + self.rule.check_every
        return tail_repeats(text[-self.rule.window:], self.rule.min_repeats, self.rule.max_unit)

    def __call__(self, token):
        self.stream.add(token)
        return self.feed_text(self.stream.text)
