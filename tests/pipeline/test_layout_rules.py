"""PaddleX 3.7.2's layout rules for PaddleOCR-VL on hand-built blocks, every case with its numbers: the versions'
thresholds (strict, after rounding), NMS on boxes (+1 px IoU) and on quadrilaterals, page-sized images, containment,
the "auto" outline (rectangle, minimum-area quad or polygon) and the pipeline's overlap filter (6 px sides, inline
formulas, the polygon re-check, the picture/table exemptions); the polygon measures they are written in."""

import numpy as np
import pytest

from ms_ocr.layout import LayoutBlock
from ms_ocr.pipeline import geometry as G
from ms_ocr.pipeline import layout_filter as F
from ms_ocr.pipeline.versions import VERSIONS


def _b(label, box, score=0.9, order=0, points=None):
    return LayoutBlock(label, 0, score, tuple(float(v) for v in box), order, points)


def _rotated(w, h, degrees, centre):
    """Corners of a w x h rectangle turned by `degrees` about `centre`."""
    t = np.radians(degrees)
    r = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
    corners = np.array([[-w / 2, -h / 2], [w / 2, -h / 2], [w / 2, h / 2], [-w / 2, h / 2]])
    return corners @ r.T + np.asarray(centre, float)


def test_polygon_measures():
    square = [(0, 0), (10, 0), (10, 10), (0, 10)]
    ell = [(0, 0), (10, 0), (10, 5), (5, 5), (5, 10), (0, 10)]  # an L: 75 of the square's 100
    assert G.polygon_area(ell) == 75.0
    assert G.polygon_intersection_area(ell, [(2, 2), (8, 2), (8, 8), (2, 8)]) == pytest.approx(27.0)  # 18 + 9
    assert G.polygon_intersection_area(ell, [(5, 5), (10, 5), (10, 10), (5, 10)]) == pytest.approx(0.0)
    assert G.polygon_intersection_area(ell[::-1], square) == pytest.approx(75.0)  # orientation does not matter
    assert G.polygon_overlap(ell, square) == pytest.approx(0.75)
    assert G.polygon_overlap(ell, square, "small") == pytest.approx(1.0)
    assert G.polygon_overlap(ell, square, "large") == pytest.approx(0.75)
    assert G.box_iou_plus_one((0, 0, 99, 99), (0, 0, 99, 80)) == pytest.approx(81 / 100)
    assert G.box_overlap_small((0, 0, 100, 100), (50, 50, 140, 70)) == pytest.approx(1000 / 1800)
    diamond = [(5, 0), (10, 5), (5, 10), (0, 5)]
    np.testing.assert_allclose(G.min_area_quad(diamond), [[5, 0], [10, 5], [5, 10], [0, 5]], atol=1e-4)
    np.testing.assert_allclose(G.min_area_quad([(10, 5), (0, 0), (10, 0), (0, 5)]),
                               [[0, 0], [10, 0], [10, 5], [0, 5]], atol=1e-4)


def test_thresholds_of_each_version():
    labels = ["text", "seal", "table", "doc_title"]
    assert VERSIONS["1.0"].threshold_table(labels) == {"text": 0.4, "seal": 0.45, "table": 0.5, "doc_title": 0.4}
    assert VERSIONS["1.5"].threshold_table(labels) == VERSIONS["1.6"].threshold_table(labels) == dict.fromkeys(
        labels, 0.3)
    assert VERSIONS["1.0"].threshold_table(labels, 0.25) == dict.fromkeys(labels, 0.25)  # --layout-threshold


def test_scores_are_kept_strictly_above_the_threshold_and_boxes_rounded():
    v = VERSIONS["1.6"]
    at = _b("text", (0, 0, 50, 50), 0.3, 0)
    above = _b("text", (10.5, 100.49, 99.5, 180.51), 0.3001, 1)
    kept = F.postprocess([at, above], 800, 1000, v, v.threshold_table(["text"]))
    assert [b.order for b in kept] == [1]
    assert kept[0].box == (10, 100, 100, 181)  # numpy rounds halves to even: 10.5 -> 10, 99.5 -> 100
    table = _b("table", (0, 200, 300, 400), 0.45, 2)  # 1.0 keeps tables above 0.5, 1.6 above 0.3
    assert F.filter_blocks([table], 800, 1000, VERSIONS["1.0"]) == []
    assert [b.label for b in F.filter_blocks([table], 800, 1000, VERSIONS["1.6"])] == ["table"]


def test_nms_same_label_vs_other_label():
    a = _b("text", (0, 0, 99, 99), 0.9, 0)
    same = _b("text", (0, 0, 99, 80), 0.8, 1)       # IoU (+1 px) = 81/100 >= 0.6: dropped
    other = _b("table", (0, 0, 99, 80), 0.8, 2)     # another label needs IoU >= 0.98: kept
    twin = _b("table", (0, 0, 99, 99), 0.7, 3)      # identical box of another label: dropped (by `a`)
    far = _b("text", (200, 0, 299, 99), 0.5, 4)
    assert [b.order for b in F.nms([a, same, other, twin, far])] == [0, 2, 4]
    # equal scores: the later block is taken first, as PaddleX's reversed argsort orders them
    assert [b.order for b in F.nms([_b("text", (0, 0, 99, 99), 0.9, 0), _b("text", (0, 0, 99, 99), 0.9, 1)])] == [1]


def test_quad_nms_compares_the_quadrilaterals():
    """A diamond and the square around it: the boxes are equal (box IoU 1), the quads share half (IoU 0.5 < 0.6)."""
    diamond = _b("text", (0, 0, 100, 100), 0.9, 0, ((50, 0), (100, 50), (50, 100), (0, 50)))
    square = _b("text", (0, 0, 100, 100), 0.8, 1, ((0, 0), (100, 0), (100, 100), (0, 100)))
    assert G.polygon_overlap(diamond.points, square.points) == pytest.approx(0.5)
    assert [b.order for b in F.nms([diamond, square])] == [0]
    assert [b.order for b in F.nms([diamond, square], quad=True)] == [0, 1]
    inner = _b("text", (0, 0, 100, 100), 0.7, 2, ((10, 0), (100, 0), (100, 100), (10, 100)))  # 0.9 of the square
    assert [b.order for b in F.nms([square, inner], quad=True)] == [1]


def test_page_sized_image_dropped_unless_alone():
    page = _b("image", (0, 0, 600, 790))            # 98.7 % of a portrait 600 x 800 page
    fig = _b("image", (10, 10, 300, 300))
    text = _b("text", (10, 400, 500, 500))
    assert F.drop_page_images([page, fig, text], 600, 800) == [fig, text]
    assert F.drop_page_images([page], 600, 800) == [page]
    assert F.drop_page_images([page, _b("image", (0, 0, 600, 780))], 600, 800) == [page, _b("image", (0, 0, 600, 780))]
    wide = _b("image", (0, 0, 800, 500))            # 83 % of a landscape page: above its 82 % limit
    assert F.drop_page_images([wide, text], 800, 600) == [text]
    at_limit = _b("image", (0, 0, 558, 800))        # 446,400 px = 93 % of 480,000 exactly: kept
    assert F.drop_page_images([at_limit, _b("image", (0, 0, 559, 800)), text], 600, 800) == [at_limit, text]


def test_boxes_inside_titles_and_formulas_removed():
    title = _b("paragraph_title", (0, 0, 200, 40))
    inner = _b("text", (5, 5, 195, 38))             # entirely inside the title
    half = _b("text", (100, 0, 300, 40))            # half inside: kept
    formula = _b("display_formula", (0, 100, 300, 160))
    inline = _b("inline_formula", (20, 110, 80, 150))
    text = _b("text", (0, 200, 300, 300))
    big_text = _b("text", (0, 190, 400, 400))       # text is not a container label: `text` stays here
    edge = _b("text", (0, 40, 200, 50))            # touches the title's edge only
    assert F.drop_contained([title, inner, half, formula, inline, text, big_text, edge]) == \
        [title, half, formula, text, big_text, edge]
    ninety = _b("text", (0, 4, 100, 44))             # 36 of its 40 rows inside the title: exactly 0.9 -> dropped
    assert F.drop_contained([title, ninety]) == [title]


def test_auto_outline_rect_quad_or_polygon():
    box = (0.0, 0.0, 200.0, 100.0)
    rect = [[0, 0], [200, 0], [200, 100], [0, 100]]
    with_midpoint = ((0, 0), (100, 0), (200, 0), (200, 100), (0, 100))  # the box itself: its quad fits (IoU 1)
    np.testing.assert_array_equal(F.auto_outline(box, with_midpoint, None), rect)
    np.testing.assert_array_equal(F.auto_outline(box, None, None), rect)
    np.testing.assert_array_equal(F.auto_outline(box, ((0, 0), (200, 0), (0, 100)), None), rect)  # < 4 points
    turned = _rotated(160, 30, 25, (100, 50))  # a turned text line: its quad is itself, far from the box
    tbox = (*turned.min(0), *turned.max(0))
    np.testing.assert_allclose(F.auto_outline(tbox, turned, None), turned, atol=1e-2)  # starts at min x + y
    # the previous block's outline covers >= 1 % of this rectangle: the polygon as detected
    previous = np.array([[0, 0], [200, 0], [200, 20], [0, 20]], float)
    np.testing.assert_array_equal(F.auto_outline(tbox, turned, previous), turned)
    ell = np.array([(0, 0), (100, 0), (100, 50), (50, 50), (50, 100), (0, 100)], float)
    bent = (ell - 50) @ np.array([[np.cos(0.5), -np.sin(0.5)], [np.sin(0.5), np.cos(0.5)]]).T + 100
    assert G.polygon_overlap(bent, G.min_area_quad(bent)) == pytest.approx(0.75, abs=1e-4)  # < 0.8: polygon
    np.testing.assert_array_equal(F.auto_outline((*bent.min(0), *bent.max(0)), bent, None), bent)


def test_postprocess_keeps_each_versions_outline():
    turned = tuple(map(tuple, _rotated(160, 30, 25, (300, 300))))
    line = _b("text", (200, 250, 400, 350), 0.9, 0, turned)
    v2, v3, v4 = (F.postprocess([line], 800, 1000, VERSIONS[n], {"text": 0.3}) for n in ("1.0", "1.6", "1.8"))
    assert v2[0].points is None                                   # 1.0: rectangles only
    np.testing.assert_allclose(v3[0].points, turned, atol=1e-3)   # auto: this quad fits
    np.testing.assert_allclose(v4[0].points, turned)              # 1.8: as detected
    assert v3[0].box == (200, 250, 400, 350)
    edge = [_b("text", (-5, 995.4, 70, 1010), 0.9, 1), _b("text", (10, 1000.4, 70, 1010), 0.9, 2)]
    kept = F.postprocess(edge, 800, 1000, VERSIONS["1.0"], {"text": 0.4})
    assert [b.box for b in kept] == [(0, 995, 70, 1000)]  # clipped to the page; the second is empty there


def test_overlap_filter_small_sides_and_inline_formulas():
    text = _b("text", (0, 0, 100, 100))
    assert F.drop_overlaps([_b("text", (0, 0, 5, 100)), _b("text", (200, 0, 206, 100))]) == \
        [_b("text", (200, 0, 206, 100))]                            # 5 px wide goes, 6 px stays
    half = _b("inline_formula", (50, 50, 150, 70))                  # overlap 1000 / 2000 = 0.5: not above, kept
    more = _b("inline_formula", (50, 50, 140, 70))                  # 1000 / 1800 = 0.56: the formula goes
    assert F.drop_overlaps([text, half]) == [text, half]
    assert F.drop_overlaps([text, more]) == [text]
    assert F.drop_overlaps([more, text]) == [text]
    twin = _b("inline_formula", (55, 50, 140, 70))                  # two inline formulas: both go
    assert F.drop_overlaps([more, twin, text]) == [text]


def test_overlap_filter_pairs_of_labels():
    big = _b("text", (0, 0, 100, 100))
    small = _b("text", (0, 0, 100, 80))                             # 100 % of the smaller: the smaller goes
    assert F.drop_overlaps([small, big]) == [big]
    assert F.drop_overlaps([big, _b("text", (0, 0, 100, 100), 0.5, 1)]) == [big]  # a tie: the later goes
    for label, survives in (("image", True), ("chart", True), ("seal", True), ("table", False)):
        pair = [_b("table" if label == "table" else label, (0, 0, 100, 100)), _b("figure_title", (0, 0, 100, 80))]
        assert len(F.drop_overlaps(pair)) == (2 if survives else 1), label
    assert len(F.drop_overlaps([_b("table", (0, 0, 100, 100)), _b("image", (0, 0, 100, 80))])) == 2
    assert len(F.drop_overlaps([_b("chart", (0, 0, 100, 100)), _b("seal", (0, 0, 100, 80))])) == 2
    assert F.drop_overlaps([_b("table", (0, 0, 100, 100)), _b("text", (0, 0, 100, 80))]) == \
        [_b("table", (0, 0, 100, 100))]
    assert F.drop_overlaps([_b("reference", (0, 800, 300, 900)), _b("reference_content", (0, 810, 300, 850))]) == \
        [_b("reference_content", (0, 810, 300, 850))]
    assert F.drop_overlaps([_b("text", (0, 0, 100, 100)), _b("text", (30, 0, 130, 100))]) == \
        [_b("text", (0, 0, 100, 100)), _b("text", (30, 0, 130, 100))]  # 0.7 of the smaller: not above


def test_overlap_filter_rechecks_outlines():
    """Boxes overlapping entirely, outlines the two halves of a square (overlap 0): both stay unless the shape
    mode is "rect"; the check uses the first block's outline, so it needs one."""
    upper = _b("text", (0, 0, 100, 100), points=((0, 0), (100, 0), (0, 100), (0, 50)))
    lower = _b("text", (0, 0, 100, 100), 0.8, 1, ((100, 0), (100, 100), (0, 100), (50, 50)))
    assert G.polygon_overlap(upper.points, lower.points, "small") == pytest.approx(0.0, abs=1e-9)
    assert F.drop_overlaps([upper, lower], "auto") == [upper, lower]
    assert F.drop_overlaps([upper, lower], "rect") == [upper]
    plain = _b("text", (0, 0, 100, 100))
    assert F.drop_overlaps([plain, lower], "auto") == [plain]
    # outlines sharing 70 % or more of the smaller: the smaller block goes as without outlines
    whole = _b("text", (0, 0, 100, 100), points=((0, 0), (100, 0), (100, 100), (0, 100)))
    most = _b("text", (0, 0, 100, 100), 0.8, 1, ((0, 0), (100, 0), (100, 80), (0, 80)))
    assert F.drop_overlaps([whole, most], "as_detected") == [whole]
