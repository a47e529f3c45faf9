"""Spotting parser and the long-output cleanup on hand-written outputs."""

from PIL import Image

from ms_ocr.models.hunyuan_vl.host import postprocess
from ms_ocr.models.hunyuan_vl.postprocess import clean_repeated_substrings, parse_spotting
from ms_ocr.processing.boxes import draw_boxes


def test_well_formed_lines_scale_to_pixels():
    text = "Hello World(100,200),(500,260)\n第二行 文字(0,0),(1000,1000)"
    assert parse_spotting(text, 800, 600) == [
        {"text": "Hello World", "box": [80, 120, 400, 156]},
        {"text": "第二行 文字", "box": [0, 0, 800, 600]},
    ]


def test_coordinates_truncate_like_the_reference():
    # int(x * W / 1000): 333 * 97 / 1000 = 32.301 -> 32; 999 * 97 / 1000 = 96.903 -> 96
    assert parse_spotting("a(333,999),(999,333)", 97, 97)[0]["box"] == [32, 96, 96, 32]


def test_parentheses_inside_text_are_kept():
    text = "f(x) = (a+b)(c)(10,20),(30,40)total (net)(50,60),(70,80)"
    items = parse_spotting(text, 1000, 1000)
    assert [i["text"] for i in items] == ["f(x) = (a+b)(c)", "total (net)"]
    assert items[1]["box"] == [50, 60, 70, 80]


def test_truncated_output_drops_the_incomplete_item():
    text = "first(1,2),(3,4)second(5,6),(7"
    assert parse_spotting(text, 1000, 1000) == [{"text": "first", "box": [1, 2, 3, 4]}]
    assert parse_spotting("no boxes at all", 10, 10) == []
    assert parse_spotting("", 10, 10) == []


def test_repeated_tail_is_cut_to_one_copy_only_for_long_outputs():
    head = "x" * 7990 + "q"
    text = head + "ab" * 30
    assert clean_repeated_substrings(text) == head + "ab"
    short = "ab" * 30
    assert clean_repeated_substrings(short) == short  # under 8000 characters: unchanged
    # the smallest repeating unit wins: "abcabc..." is first caught at length 3
    assert clean_repeated_substrings("y" * 8000 + "abc" * 12) == "y" * 8000 + "abc"
    # fewer than 10 repeats: unchanged
    text9 = "z" * 8000 + "k" + "abc" * 9
    assert clean_repeated_substrings(text9) == text9


def test_postprocess_parses_boxes_for_spotting_only():
    img = Image.new("RGB", (200, 100))
    text, extras = postprocess("cat(0,0),(500,500)", "spotting", [img])
    assert extras == {"boxes": [{"text": "cat", "box": [0, 0, 100, 50]}]}
    assert postprocess("cat(0,0),(500,500)", "ocr", [img]) == ("cat(0,0),(500,500)", {})


def test_draw_boxes_marks_the_box_outline():
    img = Image.new("RGB", (100, 80), (255, 255, 255))
    out = draw_boxes(img, [{"text": "", "box": [10, 10, 60, 50]}])
    assert out.size == img.size
    assert out.getpixel((10, 30)) != (255, 255, 255)  # outline drawn
    assert out.getpixel((90, 70)) == (255, 255, 255)  # outside untouched
