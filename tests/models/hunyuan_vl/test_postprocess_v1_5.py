"""HunyuanOCR-1.5's output handling: the clean-up threshold per version, spotting_json answers (valid, truncated,
malformed) into boxes, doc_parse normalisation only for doc_parse, each a default an entry point can override."""

import functools

from PIL import Image

from ms_ocr import models
from ms_ocr.models.hunyuan_vl.host import postprocess
from ms_ocr.models.hunyuan_vl.postprocess import clean_repeated_substrings, parse_spotting_json
from tests.models.hunyuan_vl import tencent_tasks as T

VERSIONS = dict(models.get("hunyuan-ocr").all_versions())
IMG = Image.new("RGB", (200, 100))


def bound(version):
    """The post-processing a pipeline of that version runs (ModelSpec.host_side binds the spec's options)."""
    return functools.partial(postprocess, **VERSIONS[version].postprocess_options)


def test_clean_up_starts_at_2000_characters_for_1_5_and_8000_for_1_0():
    head = "q" + "x" * 1990  # with 20 copies of "ab": 2,031 characters
    text = head + "ab" * 20
    assert len(text) >= T.CLEAN_UP_FROM
    assert bound("1.5")(text, "structured_parse", [IMG])[0] == head + "ab"
    assert bound("1.0")(text, "ocr", [IMG])[0] == text  # under 8,000: 1.0's scripts leave it
    assert clean_repeated_substrings("q" + "ab" * 999, 2000) == "q" + "ab" * 999  # 1,999 characters: unchanged
    assert clean_repeated_substrings("q" + "ab" * 1000, 2000) == "qab"
    assert clean_repeated_substrings(text, 0) == text  # --clean-up-from 0: off
    # an entry point's override (VLMPipeline.postprocess_options) wins over the version's default
    assert bound("1.5")(text, "structured_parse", [IMG], clean_up_from=8000)[0] == text


def test_doc_parse_answers_only_are_normalised():
    answer = "正文(10,20),(30,40)\n$$ x=1 \\tag{2} $$"
    assert bound("1.5")(answer, "doc_parse", [IMG])[0] == "正文\n$$ x=1 $$"
    assert bound("1.5")(answer, "layout_parse", [IMG])[0] == answer  # other tasks' answers are left alone
    assert bound("1.5")(answer, "doc_parse", [IMG], normalize_doc_parse=False)[0] == answer  # --no-doc-postprocess
    assert bound("1.0")(answer, "parse", [IMG])[0] == answer  # 1.0: no normalisation


def test_spotting_json_boxes_in_pixels():
    answer = '[{"box": [0, 0, 500, 500], "text": "cat"}, {"box": [100, 200, 1000, 1000], "text": "狗 (dog)"}]'
    items, note = parse_spotting_json(answer, 200, 100)
    assert items == [{"text": "cat", "box": [0, 0, 100, 50]}, {"text": "狗 (dog)", "box": [20, 20, 200, 100]}]
    assert note is None
    # int(v * size / 1000), as the 1.0 parser: 333 * 97 / 1000 = 32.301 -> 32
    assert parse_spotting_json('[{"box": [333, 999, 999.9, 1], "text": "a"}]', 97, 97)[0][0]["box"] == [32, 96, 96, 0]
    fenced = "```json\n" + answer + "\n```"
    assert parse_spotting_json(fenced, 200, 100) == (items, None)
    text, extras = bound("1.5")(answer, "spotting_json", [IMG])
    assert text == answer and extras == {"boxes": items}


def test_a_truncated_answer_keeps_the_boxes_that_parse_and_says_so():
    answer = '[{"box": [0, 0, 500, 500], "text": "cat"}, {"box": [100, 200, 1000, 1000], "text": "do'
    items, note = parse_spotting_json(answer, 200, 100)
    assert items == [{"text": "cat", "box": [0, 0, 100, 50]}]
    assert "not a complete JSON array" in note and "kept 1 box" in note and "\n" not in note
    text, extras = bound("1.5")(answer, "spotting_json", [IMG])
    assert text == answer and extras == {"boxes": items, "notes": [note]}


def test_a_malformed_answer_keeps_what_parses():
    # a missing comma between elements, a box of three numbers, a text that is no string, prose around
    answer = ('Here: [{"box": [0, 0, 10, 10], "text": "a"} {"box": [1, 2, 3], "text": "b"}, '
              '{"box": [0, 0, 1000, 1000], "text": 5}, {"box": [0, 0, 1000, 1000], "text": "c"}] done')
    items, note = parse_spotting_json(answer, 1000, 1000)
    assert items == [{"text": "a", "box": [0, 0, 10, 10]}, {"text": "c", "box": [0, 0, 1000, 1000]}]
    assert "not a complete JSON array" in note and "2 element(s) without" in note
    # valid JSON, wrong elements: counted, no box invented
    items, note = parse_spotting_json('[{"box": [0, 0, 1, 1]}, {"text": "x"}]', 10, 10)
    assert items == [] and note.startswith("the spotting_json answer has 2 element(s)")
    assert parse_spotting_json("no json at all", 10, 10) == ([], "the spotting_json answer is not a complete JSON "
                                                             "array (truncated or malformed): kept 0 box(es) that "
                                                             "parse")
    assert parse_spotting_json("[]", 10, 10) == ([], None)


def test_spotting_hunyuan_is_parsed_as_1_0_spotting():
    text, extras = bound("1.5")("cat(0,0),(500,500)", "spotting_hunyuan", [IMG])
    assert extras == {"boxes": [{"text": "cat", "box": [0, 0, 100, 50]}]}
