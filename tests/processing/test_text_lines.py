"""processing/text_lines.py: a crop's text lines found and scaled to a line reader's height, on crops drawn as users
bring them (training/demo/data.py sample_crop: lines 20-200 px high with paper around, screenshots, blocks)."""

import random

import numpy as np
import pytest
from PIL import Image

from ms_ocr.processing.text_lines import ink_mask, line_boxes, line_images
from training.demo import data as demo_data

needs_fonts = pytest.mark.skipif(bool(demo_data.missing_fonts()), reason=f"fonts missing: {demo_data.missing_fonts()}")


@needs_fonts
def test_every_line_of_a_block_is_found_in_order():
    """60 held-out blocks of 2-4 lines (scanned and screenshots, 11-40 px text, 1.0-1.5 line pitch): the number of
    lines found is the number drawn in all but at most 2, and the boxes go top to bottom without overlapping."""
    rng = random.Random(4400)
    wrong = 0
    for _ in range(60):
        img, text, _ = demo_data.sample_crop(rng, kind="block", max_area=None)
        boxes = line_boxes(img)
        wrong += len(boxes) != text.count("\n") + 1
        assert all(a[3] <= b[1] for a, b in zip(boxes, boxes[1:]))
    assert wrong <= 2


@needs_fonts
@pytest.mark.parametrize("kind", ["line", "screen"])
def test_a_single_line_crop_gives_one_line_at_the_readers_height(kind):
    """Single lines of every height (20-200 px) and screenshots: one line, 34 px high, its ink ~21 px of it (up to 25 with the resampling's soft edges) (the
    training's 34-px line with its 58-72 % font) and at least a pixel of paper on each side."""
    rng = random.Random(4500 + len(kind))
    for _ in range(30):
        img, text, _ = demo_data.sample_crop(rng, kind=kind, max_area=None)
        lines = line_images(img, 34)
        assert len(lines) == 1, (kind, img.size, text)
        rows = np.nonzero(ink_mask(lines[0]).any(1))[0]
        cols = np.nonzero(ink_mask(lines[0]).any(0))[0]
        assert lines[0].height == 34 and 16 <= rows[-1] - rows[0] + 1 <= 25
        assert rows[0] >= 1 and rows[-1] <= 32 and cols[0] >= 1 and cols[-1] <= lines[0].width - 2
        assert lines[0].width % 112 == 0  # paper on the right to a multiple of 112 px: few image sizes


def test_no_ink_gives_the_image_itself_and_dark_paper_works():
    blank = Image.new("RGB", (120, 40), (250, 250, 250))
    assert line_boxes(blank) == [] and line_images(blank, 34)[0].size == (120, 40)
    dark = np.full((60, 200), 20, np.uint8)  # light text on dark paper: ink is what differs from the border
    dark[20:36, 30:150] = 230
    dark[26:30, 60:70] = 20
    assert line_boxes(Image.fromarray(dark)) == [(30, 20, 150, 36)]
