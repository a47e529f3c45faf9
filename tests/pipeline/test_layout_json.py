"""The page JSON's "layout" from the command line against transformers 5.25: `python -m ms_ocr.pipeline --image
page.png --out OUT --layout-model-path DIR --layout-threshold T` with a transformers-saved random PP-DocLayoutV3 or
V4 folder (the demo recogniser reads the regions) writes exactly the reference post_process_object_detection's
detections for the 800x800 page at threshold T: labels and reading order equal, scores within 1e-4, boxes and
points within 1 px (of the reference's clipped to the page), V4's page geometry. Tiny configs here; the real config
(random weights and statistics) with -m slow.

T is put in the widest gap of the reference's sorted scores among the ranks RANKS, so a page's worth of detections
survives and no score lies within rounding of it."""

import json
import os

import numpy as np
import pytest

from ms_ocr.layout import LayoutBlock
from tests.cli_util import ROOT, run_module
from bench.layout import reference_pixels
from tests.helpers.layout_reference import assert_same_detections, gap_threshold, reference_postprocessor
from tests.helpers.tiny_layout import LABELS, SIZE, blocks_page

DEMO = os.path.join(ROOT, "ms_ocr", "demo", "paddleocr_vl")
PAGE = 800
# detections a threshold may keep (about a page's worth); the real config's random scores crowd within 0.003 of
# each other, so its gap of 1e-4 is found further down
RANKS = {"tiny": (15, 40), "real": (10, 80)}
FIELDS = {"v3": ("logits", "pred_boxes", "order_logits", "out_masks"),
          "v4": ("logits", "pred_boxes", "relative_order_logits", "successor_order_logits", "warp_params")}


def reference(model, version, page, size, ranks):
    """(reference detections at the gap threshold, T, detections kept, raw outputs) for a PIL page."""
    import torch
    from types import SimpleNamespace
    with torch.no_grad():
        out = model(torch.tensor(reference_pixels(page, size, size, version)))
    threshold, kept = gap_threshold(out.logits, *ranks)
    want = reference_postprocessor(version, size).post_process_object_detection(
        SimpleNamespace(**{name: getattr(out, name) for name in FIELDS[version]}), threshold=threshold,
        target_sizes=[page.size[::-1]])[0]
    return want, threshold, kept, out


def run_cli(folder, page, threshold, tmp_path):
    """The command line on `page` (saved as page.png): the page JSON record."""
    path, out = tmp_path / "page.png", tmp_path / "out"
    page.save(path)
    proc = run_module("ms_ocr.pipeline", "--image", str(path), "--out", str(out), "--model-path", DEMO,
                      "--layout-model-path", folder, "--layout-threshold", repr(threshold), "--max-new-tokens", "4",
                      "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert os.path.isfile(out / "page.md") and os.path.isfile(out / "page_layout.png")
    return json.loads((out / "page.json").read_text())


def deviations(layout, want, w, h):
    """(max |box - reference box|, max |point - reference point|) over the detections, pixels, both clipped."""
    by = {(d["order"], d["label_id"]): d for d in layout}
    box_dev = point_dev = 0.0
    for label, box, order, points in zip(want["labels"], want["boxes"], want["order_seq"], want["polygon_points"]):
        d = by[(int(order), int(label))]
        box_dev = max(box_dev, float(np.abs(np.asarray(d["box"]) - np.clip(box.numpy(), 0, [w, h, w, h])).max()))
        ref = np.clip(np.asarray(points, np.float64), 0, [w, h])
        point_dev = max(point_dev, float(np.abs(np.asarray(d["points"]) - ref).max()))
    return box_dev, point_dev


def check_layout(record, want, out, version, kept, threshold):
    """The record's "layout" is the reference's detections (assert_same_detections on the JSON's rounded values);
    V4's "warp" is its page geometry."""
    layout = record["layout"]
    assert all(d["label"] == LABELS[d["label_id"]] for d in layout)
    blocks = [LayoutBlock(**dict(d, box=tuple(d["box"]), points=tuple(map(tuple, d["points"])))) for d in layout]
    assert_same_detections(blocks, want, PAGE, PAGE, kept)
    assert [d["order"] for d in layout] == sorted(d["order"] for d in layout)  # written in reading order
    if version == "v4":
        assert list(record["warp"]) == ["roll", "quadrant_confidence", "shear", "kx", "ky"]
        np.testing.assert_allclose(list(record["warp"].values()), out.warp_params[0].numpy(), rtol=1e-4, atol=1e-5)
        assert all(len(d["points"]) == 4 for d in layout)
    else:
        assert "warp" not in record and any(len(d["points"]) != 4 for d in layout)  # traced outlines
    box_dev, point_dev = deviations(layout, want, PAGE, PAGE)
    print(f"{version}: T={threshold:.6f}, {len(layout)} detections, max deviation: boxes {box_dev:.4f} px, "
          f"points {point_dev:.4f} px")
    assert box_dev <= 1.0 and point_dev <= 1.0
    return box_dev, point_dev


@pytest.mark.parametrize("version", ["v3", "v4"])
def test_tiny_layout_json_is_the_reference_detections(tmp_path, version):
    from tests.helpers.tiny_layout import make_tiny_checkpoint
    folder = str(tmp_path / "layout")
    model = make_tiny_checkpoint(folder, version, seed=5, **({"mask_gain": 16.0} if version == "v3" else {}))
    page = blocks_page(PAGE, PAGE, blocks=20, seed=8)
    want, threshold, kept, out = reference(model, version, page, SIZE, RANKS["tiny"])
    record = run_cli(folder, page, threshold, tmp_path)
    assert record["pipeline_version"] == {"v3": "1.6", "v4": "1.8"}[version]
    check_layout(record, want, out, version, kept, threshold)


@pytest.mark.slow
@pytest.mark.parametrize("version", ["v3", "v4"])
def test_real_config_layout_json_is_the_reference_detections(tmp_path, version):
    """PP-DocLayoutV3/V4 at the reference's real configuration (HGNetV2-L, 300 queries, 6 decoder layers, V4 with
    its geometry head), the processor's own 800x800 input."""
    from bench.real_size import make_pp_doclayout_scored
    folder = str(tmp_path / "layout")
    model = make_pp_doclayout_scored(folder, version)  # V3: mask logits x16, masks pass the threshold in parts
    page = blocks_page(PAGE, PAGE, blocks=20, seed=8)
    want, threshold, kept, out = reference(model, version, page, PAGE, RANKS["real"])
    del model
    record = run_cli(folder, page, threshold, tmp_path)
    assert record["pipeline_version"] == {"v3": "1.6", "v4": "1.8"}[version]
    check_layout(record, want, out, version, kept, threshold)
