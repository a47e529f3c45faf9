"""Regions as PaddleX 3.7.2 cuts them: the outline mask of CropByBoxes checked pixel by pixel against the rule done
another way (filled on the whole page, then cut), the formula ink crop, and the merging of neighbouring text blocks
(side by side, one under the other beside a picture, the 5 px alignment, tall stacks, the blocks inside a group's
span, the stacked image)."""

import numpy as np
from PIL import Image, ImageDraw

from ms_ocr.layout import LayoutBlock
from ms_ocr.pipeline import merge as M
from ms_ocr.pipeline import regions


def _noise(w, h, seed=0):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8))


def _reference_crop(page, box, points):
    """CropByBoxes' rule written independently: the outline (truncated to integers) filled on a mask of the whole
    page, the box cut from page and mask, every pixel the mask leaves out set to 255."""
    import cv2
    arr = np.asarray(page).copy()
    mask = np.zeros(arr.shape[:2], np.uint8)
    cv2.fillPoly(mask, [np.trunc(np.asarray(points)).astype(np.int32)], 255)
    x1, y1, x2, y2 = (int(v) for v in box)
    out = arr[y1:y2, x1:x2].copy()
    out[mask[y1:y2, x1:x2] == 0] = 255
    return out


def test_polygon_masked_crop_equals_the_rule_pixel_by_pixel():
    page = _noise(120, 90)
    box = (10.7, 5.2, 80.9, 60.4)  # cut at 10, 5, 80, 60
    pentagon = ((12.9, 6.5), (79.6, 10.2), (70.3, 59.8), (30.1, 55.5), (11.2, 40.7))
    got = np.asarray(regions.crop(page, box, pentagon))
    want = _reference_crop(page, box, pentagon)
    assert got.shape == want.shape == (55, 70, 3)
    np.testing.assert_array_equal(got, want)
    white = (got == 255).all(-1)
    assert white[0, 0] and white[54, 69] and not white[27, 35]  # corners outside, the middle inside
    assert 0.6 < 1 - white.mean() < 0.9  # most of the box is inside the pentagon
    quad = ((20.2, 8.9), (78.8, 20.4), (60.5, 58.1), (15.5, 44.4))  # a skewed quadrilateral (PP-DocLayoutV4)
    np.testing.assert_array_equal(np.asarray(regions.crop(page, box, quad)), _reference_crop(page, box, quad))


def test_crop_without_an_outline_or_with_its_rectangle_is_the_box():
    page = _noise(120, 90, 1)
    plain = np.asarray(page)[5:60, 10:80]
    np.testing.assert_array_equal(np.asarray(regions.crop(page, (10.7, 5.2, 80.9, 60.4))), plain)
    rect = ((10, 5), (80, 5), (80, 60), (10, 60))
    np.testing.assert_array_equal(np.asarray(regions.crop(page, (10, 5, 80, 60), rect)), plain)
    assert regions.crop(page, (10.2, 10, 10.9, 20)) is None


def test_a_triangle_keeps_its_half():
    black = Image.new("RGB", (10, 10), "black")
    tri = np.asarray(regions.crop(black, (0, 0, 10, 10), ((0, 0), (9, 0), (0, 9))))
    kept = (tri == 0).all(-1)
    assert kept[0, 0] and kept[0, 9] and kept[9, 0] and not kept[9, 9] and not kept[5, 5]
    assert kept.sum() == 55  # the pixels with x + y <= 9, edges included


def test_formula_ink_crop():
    page = Image.new("RGB", (100, 80), "white")
    ImageDraw.Draw(page).rectangle([30, 20, 49, 29], fill=(10, 10, 10))
    region = regions.crop(page, (20.9, 10.2, 70.7, 50.99))
    assert region.size == (50, 40) and regions.trim_to_ink(region).size == (20, 10)
    thin = Image.new("RGB", (40, 20), "white")
    ImageDraw.Draw(thin).line([5, 10, 30, 10], fill=(0, 0, 0), width=2)  # ink 26 x 2: not over 2 px high
    assert regions.trim_to_ink(thin) is thin
    blank = Image.new("RGB", (10, 10), "white")
    assert regions.trim_to_ink(blank) is blank


def _t(label, box):
    return LayoutBlock(label, 0, 0.9, tuple(box), 0)


FIXED = ("image", "header_image", "footer_image", "seal", "chart", "table")


def test_text_blocks_side_by_side_merge_centred():
    left, right = _t("text", (0, 0, 100, 50)), _t("text", (120, 10, 220, 60))  # gap 20 < 0.3 x 100
    assert M.groups([left, right], FIXED) == [([0, 1], ["center"])]
    far = _t("text", (140, 10, 240, 60))  # gap 40
    assert M.groups([left, far], FIXED) == [([0], []), ([1], [])]
    title = _t("paragraph_title", (120, 10, 220, 60))  # only text merges
    assert M.groups([left, title], FIXED) == [([0], []), ([1], [])]


def test_text_blocks_one_under_the_other_merge_beside_a_picture():
    top, below = _t("text", (0, 0, 200, 40)), _t("text", (3, 50, 150, 90))  # left edges 3 px apart, gap 10
    figure = _t("image", (190, 60, 300, 200))  # touches the pair's joint box (0, 0, 200, 90)
    assert M.groups([top, below, figure], FIXED) == [([0, 1], ["left"])]
    assert M.groups([top, below], FIXED) == [([0], []), ([1], [])]  # 3.7: nothing fixed touches them
    right = _t("text", (60, 50, 198, 90))  # right edges 2 px apart
    assert M.groups([top, right, figure], FIXED) == [([0, 1], ["right"])]
    both = _t("text", (2, 50, 201, 90))  # both edges aligned: not exactly one
    assert M.groups([top, both, figure], FIXED) == [([0], []), ([1], [])]
    apart = _t("text", (3, 61, 150, 101))  # gap 21 >= 0.5 x 40
    assert M.groups([top, apart, figure], FIXED) == [([0], []), ([1], [])]


def _solid(w, h, value):
    return Image.new("RGB", (w, h), (value, value, value))


def test_merge_order_images_and_groups():
    blocks = [_t("text", (0, 0, 200, 40)), _t("image", (190, 45, 300, 200)), _t("text", (3, 50, 150, 90)),
              _t("table", (0, 300, 200, 400))]
    crops = [_solid(200, 40, 10), _solid(110, 155, 20), _solid(147, 40, 30), _solid(200, 100, 40)]
    order, images, group_of = M.merge(blocks, crops, FIXED)
    assert order == [0, 2, 1, 3]  # the picture inside the group's span comes after the group
    assert group_of == [0, 1, 0, 3] and images[2] is None and images[1] is crops[1] and images[3] is crops[3]
    stacked = np.asarray(images[0])
    assert stacked.shape == (80, 200, 3)
    assert (stacked[:40] == 10).all() and (stacked[40:, :147] == 30).all() and (stacked[40:, 147:] == 255).all()


def test_a_tall_group_stays_apart():
    blocks = [_t("text", (0, 0, 20, 40)), _t("text", (2, 45, 14, 85)), _t("image", (0, 80, 100, 200))]
    crops = [_solid(20, 40, 10), _solid(12, 40, 30), _solid(100, 120, 50)]  # 80 high / 20 wide >= 3
    order, images, group_of = M.merge(blocks, crops, FIXED)
    assert M.groups(blocks, FIXED)[0] == ([0, 1], ["left"])
    assert order == [0, 1, 2] and group_of == [0, 1, 2] and images == crops


def test_stack_aligns_each_step():
    a, b, c = _solid(60, 10, 10), _solid(100, 10, 20), _solid(40, 10, 30)
    canvas = np.asarray(M.stack([a, b, c], ["center", "right"]))
    assert canvas.shape == (30, 100, 3)
    row = lambda y: np.flatnonzero(canvas[y, :, 0] != 255)  # noqa: E731
    assert (row(0).min(), row(0).max()) == (20, 79)  # the first, centred in the second's width
    assert (row(15).min(), row(15).max()) == (0, 99)
    assert (row(25).min(), row(25).max()) == (60, 99)  # right-aligned
    left = np.asarray(M.stack([a, b], ["left"]))
    assert np.flatnonzero(left[0, :, 0] != 255).max() == 59
