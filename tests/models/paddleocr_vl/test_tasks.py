"""PaddleOCR-VL-1.5's tasks as PaddleX 3.4 runs them: the spotting answer parsed into boxes (both output forms),
spotting images upscaled 2x below 1,500 px a side and resized within 112,896..1,605,632 pixels, the spotting answer
decoded with its special tokens, and the server's pixel ceiling raised to the spotting bound for spotting requests."""

import dataclasses

import numpy as np
import pytest
from PIL import Image

from ms_ocr.models.paddleocr_vl import SPEC
from ms_ocr.models.paddleocr_vl.host import postprocess, task_image
from ms_ocr.models.paddleocr_vl.postprocess import parse_spotting, spotting_text


def _locs(*values):
    return "".join(f"<|LOC_{v}|>" for v in values)


def test_annotated_items_map_to_pixels_of_the_image_as_given():
    text = ("<|TEXT_START|>Total 12.50<|TEXT_END|><|LOC_BEGIN|>" + _locs(100, 200, 300, 200, 300, 250, 100, 250)
            + "<|LOC_END|>\n<|TEXT_START|>Due<|TEXT_END|><|LOC_BEGIN|>" + _locs(0, 0, 1000, 0, 1000, 1000, 0, 1000, 7)
            + "<|LOC_END|><|TEXT_START|>cut<|TEXT_END|><|LOC_BEGIN|>" + _locs(1, 2, 3) + "<|LOC_END|>")
    items = parse_spotting(text, 640, 480)
    assert [i["text"] for i in items] == ["Total 12.50", "Due"]  # the 3-value box is no item
    assert items[0]["poly"] == [[64.0, 96.0], [192.0, 96.0], [192.0, 120.0], [64.0, 120.0]]
    assert items[0]["box"] == [64, 96, 192, 120]
    assert items[1]["poly"][2] == [640.0, 480.0]  # 1000 is the far edge; a ninth value is ignored
    assert spotting_text(items) == "Total 12.50\nDue"


def test_plain_items_take_the_text_since_the_previous_box():
    text = ("BOOK TA K" + _locs(160, 310, 400, 310, 400, 350, 160, 350) + " SDN BHD" + _locs(1, 2, 3, 4, 5, 6, 7, 8)
            + "tail" + _locs(9, 9))
    items = parse_spotting(text, 200, 100)
    assert [i["text"] for i in items] == ["BOOK TA K", "SDN BHD"]  # "tail" has no complete box
    assert items[0]["box"] == [32, 31, 80, 35]
    # text between two of the eight values: those are not one box
    assert parse_spotting("a" + _locs(1, 2, 3) + "b" + _locs(4, 5, 6, 7, 8), 100, 100) == []
    assert parse_spotting("no boxes at all", 100, 100) == []


def test_spotting_image_is_upscaled_below_1500_px_a_side():
    small, wide = Image.new("RGB", (700, 300)), Image.new("RGB", (1600, 300))
    assert task_image(small, "spotting").size == (1400, 600)
    assert task_image(wide, "spotting") is wide and task_image(small, "ocr") is small
    assert task_image(Image.new("RGB", (1499, 1499)), "spotting").size == (2998, 2998)


def test_postprocess_gives_boxes_for_spotting_only():
    text = "A" + _locs(0, 0, 500, 0, 500, 500, 0, 500)
    img = Image.new("RGB", (300, 100))
    out, extras = postprocess(text, "spotting", [img])
    assert out == text and extras["boxes"][0]["box"] == [0, 0, 150, 50]
    assert postprocess(text, "ocr", [img]) == (text, {})


def test_spec_declares_the_tasks_as_paddlex_sends_them():
    assert SPEC.tasks["spotting"] == "Spotting:" and SPEC.tasks["seal"] == "Seal Recognition:"
    assert SPEC.task_pixels == {"spotting": (112896, 1605632)} and SPEC.special_token_tasks == ("spotting",)


@pytest.fixture(scope="module")
def pipe(graph_mode, tiny_checkpoint):
    from ms_ocr.runtime import Buckets
    return SPEC.load(tiny_checkpoint("hub"), "CPU", "auto", Buckets(prefill=32, slots=64))


def test_spotting_inputs_and_answer_through_the_pipeline(pipe):
    """prepare(task="spotting"): the image at twice its size, resized within the spotting bounds (not the
    checkpoint's), prompt as given; finish(task="spotting") keeps special tokens, other tasks drop them."""
    from ms_ocr.processing.settings import smart_resize

    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (60, 90, 3), np.uint8))
    settings = pipe.processor.settings
    assert (settings.min_pixels, settings.max_pixels) != SPEC.task_pixels["spotting"]
    merge = settings.patch_size * settings.merge_size
    for task, size, (lo, hi) in ((None, (90, 60), (settings.min_pixels, settings.max_pixels)),
                                 ("spotting", (180, 120), SPEC.task_pixels["spotting"])):
        prep, out = pipe.prepare([img], SPEC.tasks["spotting"], task)
        h, w = smart_resize(size[1], size[0], merge, lo, hi, enlarge_thin=True)
        assert int(prep.image_token_mask.sum()) == (h // merge) * (w // merge), task
    special = pipe.processor.tokenizer.encode("<|IMAGE_START|>", add_special_tokens=False)
    ids = special + pipe.processor.tokenizer.encode("ab", add_special_tokens=False)
    assert "<|IMAGE_START|>" in pipe.finish(ids, "stop", "spotting", [img])["text"]
    assert "<|IMAGE_START|>" not in pipe.finish(ids, "stop", "ocr", [img])["text"]


def test_server_pixel_ceiling_is_the_largest_task_bound():
    from ms_ocr.serve.prompt import clamp_pixels
    from ms_ocr.vlm import TaskInputs

    @dataclasses.dataclass
    class Settings:
        min_pixels: int = 112896
        max_pixels: int = 1003520
        patch_size: int = 14
        merge_size: int = 2

    settings, tasks = Settings(), TaskInputs(dict(SPEC.task_pixels), prompts=dict(SPEC.tasks))
    asked = {"min_pixels": 112896, "max_pixels": 1605632}  # PaddleX's spotting request
    assert clamp_pixels(settings, asked) == {"min_pixels": 112896, "max_pixels": 1003520}
    assert clamp_pixels(settings, asked, tasks.max_pixels(settings, " Spotting:\n")) == asked
    assert clamp_pixels(settings, {"max_pixels": 10 ** 9}, tasks.max_pixels(settings, "Spotting:"))["max_pixels"] \
        == 1605632
    # any other request keeps the checkpoint's bound (OCR:, free text, no prompt)
    assert {tasks.max_pixels(settings, p) for p in ("OCR:", "Seal Recognition:", "Spotting: the left half", None)} \
        == {1003520}
