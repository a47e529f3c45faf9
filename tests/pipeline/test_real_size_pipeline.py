"""The 1.5 / 1.6 and 1.8 pipelines end to end from the command line with the real-size recogniser (-m slow):
PaddleOCR-VL 0.9B (random weights, bf16 as the hub ships it, ~/.cache/ms_ocr/bench) reads the regions a tiny random
PP-DocLayoutV3 / V4 finds on a page that holds no white pixel (the real layout configs' random weights give one
cluster of near-equal boxes, of which the pipeline's rules keep one: tests/pipeline/test_layout_json.py runs them).
The run completes, the page's JSON and Markdown are written (the Markdown as the page's blocks assemble it), and
every region image that reaches the recogniser as cut (not merged, not trimmed to ink) is PaddleX's CropByBoxes of
its block: the box at truncated coordinates, page pixels inside the outline (the truncated points filled by
cv2.fillPoly), 255 outside; some of them with pixels outside their outline."""

import json
import os

import numpy as np
import pytest

from bench.layout import reference_pixels
from tests.helpers.layout_reference import gap_threshold

W, H = 800, 1000
LO, HI = 8, 14  # detections the threshold keeps (regions for the 0.9B recogniser, a few seconds each)
NEW_TOKENS = 4
# layout seeds whose random detections leave text regions after the pipeline's rules on this page (random detectors
# give one label, often a picture's): V3 one polygon of six points, V4 two or three quadrilaterals
SEEDS = {"v3": 5, "v4": 7}


def noise_page(seed=8):
    """blocks_page with noise in place of its white paper: no pixel is 255, so 255 in a region image is the mask's."""
    from PIL import Image
    from tests.helpers.tiny_layout import blocks_page
    img = np.array(blocks_page(W, H, blocks=20, seed=seed))
    white = (img == 255).all(-1)
    img[white] = np.random.default_rng(seed).integers(200, 250, (int(white.sum()), 3))
    return Image.fromarray(img)


@pytest.fixture(scope="module")
def real_vlm(graph_mode):
    """(folder, the loaded real-size PaddleOCR-VL): loaded once for the module, in the command line's dtype."""
    from ms_ocr.models.paddleocr_vl import SPEC
    from bench.real_size import BUILDERS
    folder = os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr", "bench", "paddleocr_vl_random")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        BUILDERS["paddleocr-vl"](folder)
    return folder, SPEC.load(folder, "CPU", "auto")


def crop_by_boxes(page, box, points):
    """PaddleX CropByBoxes, written out: (the crop, the mask of its pixels inside the outline)."""
    import cv2
    x1, y1, x2, y2 = (int(v) for v in box)
    region = np.array(page)[y1:y2, x1:x2]
    inside = np.zeros(region.shape[:2], np.uint8)
    cv2.fillPoly(inside, [np.asarray(points, np.float64).astype(np.int32) - np.array([x1, y1], np.int32)], 1)
    region[inside == 0] = 255
    return region, inside.astype(bool)


@pytest.mark.slow
@pytest.mark.parametrize("layout,version", [("v3", "1.5"), ("v3", "1.6"), ("v4", "1.8")])
def test_real_size_pipeline_masks_the_regions(real_vlm, tmp_path, monkeypatch, layout, version):
    import torch
    from ms_ocr.models.paddleocr_vl import SPEC
    from ms_ocr.pipeline import regions
    from ms_ocr.pipeline.cli import main
    from ms_ocr.pipeline.document import DocumentPipeline
    from tests.helpers.tiny_layout import SIZE, make_tiny_checkpoint
    vl_dir, vlm = real_vlm
    folder = str(tmp_path / "layout")
    ref = make_tiny_checkpoint(folder, layout, seed=SEEDS[layout], **({"mask_gain": 16.0} if layout == "v3" else {}))
    page = noise_page()
    assert not (np.asarray(page) == 255).all(-1).any()
    with torch.no_grad():
        logits = ref(torch.tensor(reference_pixels(page, SIZE, SIZE, layout))).logits
    threshold, _ = gap_threshold(logits, LO, HI, min_gap=0.0)
    del ref
    # the command line's loaders: the module's recogniser (checked to be the one asked for), the layout as loaded
    real_load = type(SPEC).load
    monkeypatch.setattr(type(SPEC), "load", lambda spec, path, *a, **k: vlm if spec is SPEC and path == vl_dir
                        else real_load(spec, path, *a, **k))
    cuts, asked, parsed = [], [], []
    real_crop, real_prepare, real_parse = regions.crop, DocumentPipeline._prepare, DocumentPipeline.parse
    monkeypatch.setattr(regions, "crop", lambda pixels, box, points=None: cuts.append(
        (box, points, real_crop(pixels, box, points))) or cuts[-1][2])
    monkeypatch.setattr(DocumentPipeline, "_prepare", lambda self, region, prompt, task: asked.append(
        (region, prompt, task)) or real_prepare(self, region, prompt, task))
    monkeypatch.setattr(DocumentPipeline, "parse", lambda self, *a, **k: parsed.append(real_parse(self, *a, **k))
                        or parsed[-1])
    path, out = tmp_path / "page.png", tmp_path / "out"
    page.save(path)
    extra = ["--pipeline-version", version] if version == "1.5" else []
    assert main(["--image", str(path), "--out", str(out), "--model-path", vl_dir, "--layout-model-path", folder,
                 "--layout-threshold", repr(threshold), "--max-new-tokens", str(NEW_TOKENS), "--device", "cpu",
                 *extra]) == 0
    record = json.loads((out / "page.json").read_text())
    markdown = (out / "page.md").read_text()
    assert record["pipeline_version"] == version and ("warp" in record) == (layout == "v4")
    assert LO - 1 <= len(record["layout"]) <= HI + 1 and all(len(d["points"]) >= 4 for d in record["layout"])
    read = [b for b in record["blocks"] if "content" in b and "image" not in b]
    assert read and all("error" not in b for b in record["blocks"])
    assert sum(record["timings"]["regions"].values()) == len(asked) >= 1
    assert markdown == parsed[0].markdown() + "\n"
    assert record["blocks"] == json.loads(json.dumps(parsed[0].as_dict()["blocks"]))
    assert sum(record["timings"][k] for k in record["timings"] if k.endswith("_tokens")) >= 1
    # every region image sent as cut is CropByBoxes of its block; the page has no white, so 255 marks the mask
    checked = masked = 0
    pixels = np.asarray(page)
    for region, _, _ in asked:
        cut = next((c for c in cuts if c[2] is region), None)
        if cut is None:  # a merged stack, or a formula trimmed to its ink
            continue
        box, points, _ = cut
        want, inside = crop_by_boxes(pixels, box, points if points is not None else
                                     [(box[0], box[1]), (box[2], box[1]), (box[2], box[3]), (box[0], box[3])])
        got = np.asarray(region)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal((got == 255).all(-1), ~inside)
        checked += 1
        masked += int((~inside).any())
    print(f"{version}: {len(record['layout'])} detections, {len(asked)} regions read, {checked} checked as cut, "
          f"{masked} with pixels outside their outline")
    assert checked >= 1 and masked >= 1
