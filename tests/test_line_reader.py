"""line_reader.LineReader: a line reader's request becomes one request per text line and one joined answer; the caller's
on_token sees the lines' tokens in reading order with the line break between them, whatever order the engine
advances them in (a crop's lines decode together in one batch)."""

import numpy as np
from PIL import Image

from ms_ocr.engine import Request
from ms_ocr.line_reader import LineReader, LineRequest, joined_lines


def _result(text, tokens, reason="stop", dump=False):
    out = {"text": text, "token_ids": list(tokens), "finish_reason": reason,
           "timings": {"latency_ms": 10.0, "first_token_ms": 2.0, "vision_ms": 3.0, "prefill_ms": 1.0,
                       "decode_tokens": len(tokens) - 1, "decode_tokens_per_s": 100.0, "prompt_tokens": 5}}
    if dump:
        out["dump"] = {"logits": np.full((len(tokens), 3), float(tokens[0]), np.float32),
                       "token_ids": np.asarray(tokens, np.int64)}
    return out


def _crop_request(lines, seen, key="a"):
    return LineRequest(key, [Image.new("RGB", (8, 8))], "OCR:", lines=[(Image.new("RGB", (8, 8)), None)] * lines,
                   on_token=lambda t: seen.append(t) or False, dump=True)


def test_lines_stream_in_reading_order_and_join():
    seen, reported = [], []
    source = [[_crop_request(3, seen), Request("plain", [], "", prep=object())]]
    fan = LineReader(lambda n, wait: source.pop(0) if source else None,
                     lambda req, res, err: reported.append((req.key, res, err)), line_break=(99,))
    subs = fan.take(8, True)
    assert [r.key for r in subs] == ["a#line0", "a#line1", "a#line2", "plain"]
    assert all(len(r.images) == 1 and not isinstance(r, LineRequest) for r in subs[:3])
    l0, l1, l2, plain = subs
    # the engine advances the lines together: line 2 and 1 produce tokens before line 0 has finished
    assert l2.on_token(30) is False and l1.on_token(20) is False and l0.on_token(10) is False
    assert seen == [10]  # the lines below wait
    assert l1.on_token(21) is False and l1.on_token(2) is False
    fan.report(l1, _result("B", [20, 21, 2], dump=True), None)  # line 1 finishes first: still waiting for line 0
    assert seen == [10] and reported == []
    assert l0.on_token(2) is False
    fan.report(l0, _result("A", [10, 2], dump=True), None)
    assert seen == [10, 2, 99, 20, 21, 2, 99, 30]  # line 1 flushed whole, line 2 live from here
    assert l2.on_token(2) is False and seen[-1] == 2
    fan.report(l2, _result("C", [30, 2], reason="length", dump=True), None)
    fan.report(plain, _result("P", [7]), None)
    assert [key for key, _, _ in reported] == ["a", "plain"]
    _, joined, err = reported[0]
    assert err is None and joined["text"] == "A\nB\nC" and joined["token_ids"] == [10, 2, 20, 21, 2, 30, 2]
    assert joined["finish_reason"] == "length" and joined["timings"]["lines"] == 3
    assert joined["timings"]["decode_tokens"] == 1 + 2 + 1 and joined["timings"]["prompt_tokens"] == 15
    assert joined["dump"]["logits"].shape == (7, 3) and joined["dump"]["token_ids"].tolist() == joined["token_ids"]
    assert fan.take(8, False) is None and not fan.crops


def test_a_stop_in_one_line_ends_the_lines_below():
    seen, reported = [], []
    crop = LineRequest("a", [Image.new("RGB", (8, 8))], "OCR:", lines=[(Image.new("RGB", (8, 8)), None)] * 2,
                   on_token=lambda t: seen.append(t) or t == 11)  # a stop string ends at token 11
    fan = LineReader(lambda n, wait: [crop], lambda req, res, err: reported.append((res, err)), line_break=(99,))
    l0, l1 = fan.take(1, True) + fan.take(1, True)  # one at a time: the rest waits in the fan's buffer
    assert l1.on_token(20) is False
    assert l0.on_token(10) is False and l0.on_token(11) is True
    fan.report(l0, _result("A", [10, 11], reason="stop"), None)
    assert seen == [10, 11] and l1.on_token(21) is True  # the line below is not read on
    fan.report(l1, _result("B", [20, 21]), None)
    assert reported[0][0]["finish_reason"] == "stop" and seen == [10, 11]


def test_a_failed_line_fails_the_crop_once():
    reported = []
    crop = LineRequest("a", [Image.new("RGB", (8, 8))], "OCR:", lines=[(Image.new("RGB", (8, 8)), None)] * 2)
    fan = LineReader(lambda n, wait: [crop], lambda req, res, err: reported.append((req.key, res, err)))
    l0, l1 = fan.take(2, True)
    fan.report(l0, None, ValueError("boom"))
    assert reported == []
    fan.report(l1, _result("B", [20]), None)
    assert len(reported) == 1 and reported[0][0] == "a" and reported[0][1] is None and str(reported[0][2]) == "boom"


def test_a_line_reader_finds_the_lines_of_an_unprepared_request():
    img = Image.new("RGB", (200, 90), "white")
    arr = np.asarray(img).copy()
    arr[10:30, 20:180] = 0  # two bars of "ink"
    arr[50:70, 20:120] = 0
    req = Request("x", [Image.fromarray(arr)], "OCR:")
    fan = LineReader(lambda n, wait: [req], lambda *a: None, height=34)
    subs = fan.take(4, True)
    assert [r.key for r in subs] == ["x#line0", "x#line1"] and all(r.images[0].height == 34 for r in subs)
    prepared = Request("y", [Image.fromarray(arr)], "OCR:", prep=object())  # prepared whole: read whole
    assert LineReader(lambda n, wait: [prepared], lambda *a: None, height=34).take(4, True) == [prepared]


def test_joined_lines_of_one_line_is_that_line():
    one = _result("A", [10, 2])
    joined = joined_lines([one])
    assert joined["text"] == "A" and joined["token_ids"] == [10, 2] and joined["timings"]["lines"] == 1


def test_line_breaks_go_to_their_own_hook_when_the_caller_gives_one():
    """The server counts generated tokens in on_token (its metrics); the line breaks between lines are text, not
    generated tokens: with on_line_break set they go there, in the same place of the stream."""
    text, generated = [], []
    crop = LineRequest("a", [Image.new("RGB", (8, 8))], "OCR:", lines=[(Image.new("RGB", (8, 8)), None)] * 2,
                   on_token=lambda t: generated.append(t) or text.append(t) or False,
                   on_line_break=lambda t: text.append(t) or False)
    source = [[crop]]
    fan = LineReader(lambda n, wait: source.pop(0) if source else None, lambda *a: None, line_break=(98, 99))
    l0, l1 = fan.take(8, True)
    assert not isinstance(l0, LineRequest) and not isinstance(l1, LineRequest)  # the lines stream through on_token
    assert l1.on_token(20) is False and l0.on_token(10) is False
    fan.report(l0, _result("A", [10]), None)
    fan.report(l1, _result("B", [20]), None)
    assert text == [10, 98, 99, 20] and generated == [10, 20]


def test_the_engine_knows_nothing_of_lines():
    """The line reader wraps the engine's request source (STYLE.md): engine.py names no line, and a pipeline that
    reads no lines passes its source through unchanged."""
    import inspect

    from ms_ocr import engine, line_reader
    source = inspect.getsource(engine)
    assert all(word not in source for word in ("LineReader", "LineFanOut", "text_line", "line_height",
                                               "on_line_break", ".lines", "joined_lines"))

    class Pipe:
        line_height, line_break_ids, finish = None, (), None

    take, report = object(), object()
    assert line_reader.adapt(Pipe(), take, report, 8) == (take, report)
    Pipe.line_height = 34
    wrapped = line_reader.adapt(Pipe(), lambda n, w: None, lambda *a: None, 8)
    assert wrapped[0].__self__.height == 34 and wrapped[0].__self__.budget == 8


def test_only_a_line_reader_specs_checkpoints_read_lines(tmp_path):
    """The ModelSpec says which models' checkpoints may read lines (line_reader); the key in a checkpoint of another
    model is not looked at."""
    import json

    from ms_ocr import models
    assert [s.name for s in models.specs() if s.line_reader] == ["paddleocr-vl"]
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"text_line_height": 34}))
    from ms_ocr.vlm import text_line_height
    assert text_line_height(str(tmp_path)) == 34
