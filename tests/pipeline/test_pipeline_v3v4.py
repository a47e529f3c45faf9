"""The 1.5 / 1.6 and 1.8 pipelines end to end on the tiny recogniser (PaddleOCR-VL-1.5's template) with fixed layout
blocks: PP-DocLayoutV3-style polygons turned into the "auto" outline, text neighbours merged into one image beside a
picture, every region image white outside its outline, the prompts, the merged member's empty text and Markdown;
1.5 = 1.6; PP-DocLayoutV4 quadrilaterals kept as detected, quad-IoU NMS keeping two blocks one box holds, the page
geometry in the JSON."""

import numpy as np
import pytest

from ms_ocr.layout import LayoutBlock
from ms_ocr.pipeline import layout_filter, merge, regions
from ms_ocr.pipeline.markdown import block_markdown
from ms_ocr.pipeline.versions import VERSIONS
from bench.pages import layout_page

W, H = 768, 1024


def _rect(box):
    x1, y1, x2, y2 = box
    return ((x1, y1), ((x1 + x2) / 2, y1), (x2, y1), (x2, y2), (x1, y2))  # a mask outline with a midpoint


def _turned(w, h, degrees, centre):
    t = np.radians(degrees)
    corners = np.array([[-w / 2, -h / 2], [w / 2, -h / 2], [w / 2, h / 2], [-w / 2, h / 2]])
    return corners @ np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]).T + np.asarray(centre, float)


TURNED = _turned(300, 40, 12, (230, 200))  # a tilted text line inside its box
V3 = [("doc_title", (120, 70, 650, 120), None), ("text", (60, 140, 400, 260), tuple(map(tuple, TURNED))),
      ("text", (63, 270, 300, 330), None), ("image", (390, 300, 700, 500), None),
      ("display_formula", (200, 520, 560, 580), None), ("table", (60, 600, 710, 760), None)]


def _v3_blocks():
    return [LayoutBlock(label, 0, 0.9, tuple(float(v) for v in box), i, points or _rect(box))
            for i, (label, box, points) in enumerate(V3)]


def _parse(vlm, version, blocks, warp=None):
    """(page, PageResult, [(region image, prompt, task)] of the recognition requests)."""
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.models.paddleocr_vl import SPEC
    from ms_ocr.pipeline import DocumentPipeline
    page = layout_page([(b.label, tuple(int(v) for v in b.box)) for b in blocks], W, H)
    doc = DocumentPipeline(None, vlm, SPEC, SamplingConfig(max_new_tokens=4), version=version)
    asked, prepare = [], doc._prepare
    doc._prepare = lambda region, prompt, task: asked.append((region, prompt, task)) or prepare(region, prompt, task)
    return page, doc.parse(page, layout_blocks=blocks, warp=warp), asked


@pytest.fixture(scope="module")
def v16(vlm15):
    return _parse(vlm15, "1.6", _v3_blocks())


def test_v16_blocks_outlines_and_groups(v16):
    _, result, _ = v16
    record = result.as_dict()
    assert record["pipeline_version"] == "1.6" and "warp" not in record
    assert [(b["label"], b["order"], b["group_id"]) for b in record["blocks"]] == [
        ("doc_title", 1, 0), ("text", 2, 1), ("text", 3, 1), ("image", None, 3), ("display_formula", 4, 4),
        ("table", None, 5)]
    # "auto" outlines: the rectangle where the polygon fills it, the minimum-area quad of the tilted line
    assert record["blocks"][0]["points"] == [[120, 70], [650, 70], [650, 120], [120, 120]]
    np.testing.assert_allclose(record["blocks"][1]["points"], TURNED, atol=0.02)
    assert record["layout"][1]["points"] == [[round(x, 2), round(y, 2)] for x, y in TURNED]  # as given
    assert result.timings["regions"] == {"text": 2, "formula": 1, "table": 1}
    assert result.blocks[2].content == "" and result.blocks[1].content and result.blocks[4].content


def test_v16_region_images_and_prompts(v16):
    page, result, asked = v16
    by_prompt = {}
    for image, prompt, task in asked:
        by_prompt.setdefault(prompt, []).append((np.asarray(image), task))
    assert sorted((p, len(v)) for p, v in by_prompt.items()) == [("Formula Recognition:", 1), ("OCR:", 2),
                                                                 ("Table Recognition:", 1)]
    title, line, below = result.blocks[:3]
    stacked = merge.stack([regions.crop(page, line.box, line.points), regions.crop(page, below.box, below.points)],
                          ["left"])
    texts = [img for img, _ in by_prompt["OCR:"]]
    np.testing.assert_array_equal(texts[0], np.asarray(page)[70:120, 120:650])  # a rectangle masks nothing
    np.testing.assert_array_equal(texts[1], np.asarray(stacked))
    assert texts[1].shape == (120 + 60, 340, 3)
    assert (texts[1][0, 0] == 255).all() and (texts[1][60, 170] != 255).any()  # white outside the tilted line
    formula = regions.trim_to_ink(regions.crop(page, (200, 520, 560, 580)))
    np.testing.assert_array_equal(by_prompt["Formula Recognition:"][0][0], np.asarray(formula))
    assert result.pictures["imgs/img_in_image_box_390_300_700_500.jpg"].size == (310, 200)


def test_v16_markdown_keeps_the_merged_members_place(v16):
    _, result, _ = v16
    md = result.markdown()
    line = block_markdown(result.blocks[1], W)
    picture = '<div style="text-align: center;"><img src="imgs/img_in_image_box_390_300_700_500.jpg"'
    assert line + "\n\n\n\n" + picture in md  # the member's empty text still adds its "\n\n"
    table = result.blocks[5]  # random tokens, no OTSL: kept as written, after the table's "\n"
    assert md.startswith("# ") and table.label == "table" and md.endswith("\n\n\n" + table.content)


def test_v15_runs_the_rules_of_v16(vlm15, v16):
    blocks = _v3_blocks()
    one5, one6 = (layout_filter.filter_blocks(blocks, W, H, VERSIONS[n]) for n in ("1.5", "1.6"))
    assert one5 == one6 and len(one6) == 6
    _, result, _ = _parse(vlm15, "1.5", blocks)
    got, want = result.as_dict(), v16[1].as_dict()
    assert got.pop("pipeline_version") == "1.5" and want.pop("pipeline_version") == "1.6"
    assert got["blocks"] == want["blocks"] and result.markdown() == v16[1].markdown()


# PP-DocLayoutV4: quadrilaterals; two text blocks one box holds, split along its diagonal
V4 = [LayoutBlock("paragraph_title", 17, 0.9, (100.0, 60.0, 500.0, 110.0), 0,
                  ((100.0, 60.0), (500.0, 70.0), (498.0, 110.0), (102.0, 100.0))),
      LayoutBlock("text", 22, 0.88, (100.0, 150.0, 500.0, 400.0), 1,
                  ((100.0, 150.0), (500.0, 150.0), (100.0, 400.0), (100.0, 275.0))),
      LayoutBlock("text", 22, 0.87, (100.0, 150.0, 500.0, 400.0), 2,
                  ((500.0, 150.0), (500.0, 400.0), (100.0, 400.0), (300.0, 275.0))),
      LayoutBlock("table", 21, 0.8, (100.0, 450.0, 700.0, 700.0), 3,
                  ((100.0, 450.0), (700.0, 450.0), (700.0, 700.0), (100.0, 700.0)))]
WARP = {"roll": -3.0, "quadrant_confidence": 0.91, "shear": 0.5, "kx": 0.0625, "ky": -0.125}


def test_v18_quadrilaterals_end_to_end(vlm15):
    assert len(layout_filter.filter_blocks(V4, W, H, VERSIONS["1.6"])) == 3  # box NMS: one box, one block
    page, result, asked = _parse(vlm15, "1.8", V4, WARP)
    record = result.as_dict()
    assert record["pipeline_version"] == "1.8" and record["warp"] == WARP
    assert [(b["label"], b["box"], b["order"]) for b in record["blocks"]] == [
        ("paragraph_title", [100, 60, 500, 110], 1), ("text", [100, 150, 500, 400], 2),
        ("text", [100, 150, 500, 400], 3), ("table", [100, 450, 700, 700], None)]
    assert [b["points"] for b in record["blocks"]] == [[list(p) for p in b.points] for b in V4]  # as detected
    halves = [np.asarray(img) for img, prompt, _ in asked if img.size == (400, 250)]
    assert len(halves) == 2
    for half, block in zip(halves, V4[1:3]):
        np.testing.assert_array_equal(half, np.asarray(regions.crop(page, block.box, block.points)))
    upper, lower = halves
    assert (upper[240, 390] == 255).all() and (lower[5, 5] == 255).all()  # each white where the other half is
    np.testing.assert_array_equal(upper[5, 5:100], np.asarray(page)[155, 105:200])
    assert [task for _, _, task in asked].count("ocr") == 3 and result.timings["regions"] == {"text": 3, "table": 1}
