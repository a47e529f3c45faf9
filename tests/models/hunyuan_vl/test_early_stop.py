"""HunyuanOCR-1.5's tail-repetition early stop (ms_ocr/stop_rules.py TailRepetition with the numbers of Tencent's
clients, tencent_tasks.py) on constructed token streams, and the engine's stop-rule hook on the tiny model."""

from dataclasses import dataclass
from typing import ClassVar

from PIL import Image

from ms_ocr.generate import SamplingConfig
from ms_ocr.stop_rules import TailRepetition, tail_repeats
from tests.models.hunyuan_vl import tencent_tasks as T

RULE = TailRepetition(**T.EARLY_STOP)


class PieceTokenizer:
    """Token id i decodes to PIECES[i] (what TextStream asks of a tokenizer)."""

    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.pieces[i] for i in ids)

    def id_to_token(self, i):
        return self.pieces[i]


def stop_position(pieces, ids, rule=RULE):
    """(index of the token the rule stops at or None, characters of the answer then)."""
    watch = rule.start(PieceTokenizer(pieces), eos_ids=[])
    text = ""
    for n, i in enumerate(ids):
        text += pieces[i]
        if watch(i):
            return n, len(text)
    return None, len(text)


def test_tail_repeats_needs_min_repeats_copies_of_a_short_visible_unit():
    assert tail_repeats("x" + "ab" * 8, 8, 256)
    assert not tail_repeats("x" + "ab" * 7, 8, 256)
    assert not tail_repeats(" \n" * 50, 8, 256)  # whitespace units never count
    unit = "".join(chr(0x4E00 + i) for i in range(257))  # longer than max_unit
    assert not tail_repeats(unit * 8, 8, 256) and tail_repeats(unit * 8, 8, 257)
    assert not tail_repeats("ab" * 7, 8, 256)  # shorter than 2 * min_repeats


def test_first_check_at_4000_characters_then_every_1000():
    """Each token is 7 characters: the first check comes with the token that reaches 4,000 (at 4,004) and finds
    the repeats that began at 3,990 too short (2 copies); the next is due 1,000 characters after 4,004, with the
    token reaching 5,004: it stops there, although 8 copies stood since 4,046."""
    pieces = ["abcdefg"] + [chr(0x4E00 + i) * 7 for i in range(600)]
    distinct = list(range(1, 571))  # 570 distinct pieces: 3,990 characters
    n, chars = stop_position(pieces, distinct + [0] * 400)
    assert chars == 5005 and n == 714
    assert chars >= T.EARLY_STOP["first_check"] + T.EARLY_STOP["check_every"]


def test_no_stop_before_the_first_check_nor_without_8_copies():
    pieces = ["ab", "c"] + [chr(0x4E00 + i) for i in range(5000)]
    assert stop_position(pieces, [0] * 1999)[0] is None  # 3,998 characters of repeats: never checked
    assert stop_position(pieces, [0] * 2000)[0] == 1999  # 4,000: checked and stopped
    # a unit repeated 7 times at every check: no stop over 12,000 characters
    unit = list(range(2, 102))  # 100 distinct one-character pieces
    ids = []
    while len(ids) < 12000:
        ids += [1] + unit * 7
    assert stop_position(pieces, ids)[0] is None


def test_units_up_to_256_characters_are_caught():
    """Eight copies of a 256-character unit (2,048 characters) end the answer at the first check that sees them
    (7,000: the checks at 4,000, 5,000 and 6,000 see 1, 1,001 and 2,001 characters of them); a 300-character unit
    (beyond max_unit) never does."""
    pieces = [chr(0x4E00 + i) for i in range(5000)]
    fill = list(range(3000, 4000)) * 4  # 3,999 characters below: no short unit repeats at their end
    n, chars = stop_position(pieces, fill[:3999] + list(range(256)) * 20)
    assert chars == 7000
    assert stop_position(pieces, fill[:3999] + list(range(300)) * 20)[0] is None


@dataclass(frozen=True)
class StopAt:
    """A stop rule that ends a sequence at its `k`-th token (the engine's hook, whatever the rule)."""
    name: ClassVar[str] = "stop_at"
    k: int

    def start(self, tokenizer, eos_ids):
        count = iter(range(1, 10 ** 9))
        return lambda token: next(count) >= self.k


def test_the_engine_ends_a_sequence_where_its_stop_rule_says(hy_pipeline):
    page = Image.new("RGB", (96, 128), (250, 250, 245))
    free = hy_pipeline.run([page], "text", SamplingConfig(max_new_tokens=8))
    out = hy_pipeline.run([page], "text", SamplingConfig(max_new_tokens=8, stop_rules=(StopAt(3),)))
    assert out["token_ids"] == free["token_ids"][:3] and out["finish_reason"] == "stop"
    assert out["stopped_by"] == "stop_at" and "stopped_by" not in free
