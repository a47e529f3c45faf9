"""PP-DocLayoutV3's post-processing against the reference class's own methods (tests/helpers/layout_reference.py)
on the same outputs: masks drawn as rectangles, L shapes and triangles (45-degree corners: the moved vertices) in
each query's box, some empty; detections, reading order and polygons equal."""

import numpy as np
import pytest

from ms_ocr.layout.processor import LayoutPreprocessConfig
from ms_ocr.layout.pp_doclayout_v3.postprocess import detections
from tests.helpers.layout_reference import reference_postprocessor

SIZE = 256  # the processor's square input; masks are SIZE / 4


def _outputs(seed, b=2, q=30, c=6):
    import cv2
    rng = np.random.default_rng(seed)
    logits = rng.normal(-0.5, 2.0, (b, q, c)).astype(np.float32)
    logits[0, 3, 1], logits[0, 3, 4] = 4.0, 3.5  # one query kept with two labels
    cxcy = rng.uniform(0.2, 0.8, (b, q, 2))
    wh = rng.uniform(0.1, 0.4, (b, q, 2))
    boxes = np.concatenate([cxcy, wh], -1).astype(np.float32)
    order = rng.normal(0, 3, (b, q, q)).astype(np.float32)
    order[:, np.tril_indices(q)[0], np.tril_indices(q)[1]] = -1e4
    m = SIZE // 4
    masks = np.full((b, q, m, m), -4.0, np.float32)
    for i in range(b):
        for j in range(q):
            x0, y0 = ((boxes[i, j, :2] - boxes[i, j, 2:] / 2) * m).astype(int)
            x1, y1 = ((boxes[i, j, :2] + boxes[i, j, 2:] / 2) * m).astype(int)
            kind = (i * q + j) % 4
            canvas = np.zeros((m, m), np.uint8)
            if kind == 0:
                cv2.rectangle(canvas, (x0 + 1, y0 + 1), (x1 - 1, y1 - 1), 1, -1)
            elif kind == 1:  # an L
                pts = [(x0, y0), ((x0 + x1) // 2, y0), ((x0 + x1) // 2, (y0 + y1) // 2), (x1, (y0 + y1) // 2),
                       (x1, y1), (x0, y1)]
                cv2.fillPoly(canvas, [np.array(pts, np.int32)], 1)
            elif kind == 2:  # a right isosceles triangle: two 45-degree corners
                side = min(x1 - x0, y1 - y0)
                cv2.fillPoly(canvas, [np.array([(x0, y0), (x0 + side, y0 + side), (x0, y0 + side)], np.int32)], 1)
            masks[i, j][canvas > 0] = 4.0  # kind 3: empty (the box's rectangle)
    masks += rng.normal(0, 0.5, masks.shape).astype(np.float32)
    return logits, boxes, order, masks


@pytest.mark.parametrize("threshold", [0.5, 0.3])
def test_detections_and_polygons_match_reference(threshold):
    import torch
    from types import SimpleNamespace
    logits, boxes, order, masks = _outputs(5)
    sizes = [(1024, 768), (600, 900)]
    ref = reference_postprocessor("v3", SIZE)
    want = ref.post_process_object_detection(
        SimpleNamespace(logits=torch.tensor(logits), pred_boxes=torch.tensor(boxes), order_logits=torch.tensor(order),
                        out_masks=torch.tensor(masks)), threshold=threshold, target_sizes=sizes)
    pcfg = LayoutPreprocessConfig(height=SIZE, width=SIZE)
    got = detections((logits, boxes, order, masks), sizes, threshold, pcfg)
    shapes = {"rect": 0, "other": 0}
    for g, w in zip(got, want):
        assert len(g["scores"]) == len(w["scores"]) > 5
        # the reference's sort is not stable: a query kept with two labels may come out either way round
        key_g = np.lexsort((g["labels"], g["order_seq"]))
        key_w = np.lexsort((w["labels"].numpy(), w["order_seq"].numpy()))
        assert g["order_seq"][key_g].tolist() == w["order_seq"].numpy()[key_w].tolist()
        assert g["labels"][key_g].tolist() == w["labels"].numpy()[key_w].tolist()
        np.testing.assert_array_equal(g["boxes"][key_g], w["boxes"].numpy()[key_w])
        for a, b in zip(key_g, key_w):
            pg, pw = np.asarray(g["polygon_points"][a], np.float64), np.asarray(w["polygon_points"][b], np.float64)
            assert pg.shape == pw.shape
            np.testing.assert_allclose(pg, pw, rtol=0, atol=1e-9)
            shapes["rect" if len(pg) == 4 else "other"] += 1
    assert shapes["rect"] > 3 and shapes["other"] > 3  # rectangles (and empty masks) and traced outlines both met


def test_per_label_threshold_binarises_each_mask_at_its_label():
    """With one threshold per label, a detection's mask is cut at its label's threshold (the reference's single
    threshold generalised): equal to the reference run at that threshold for that label's detections."""
    import torch
    from types import SimpleNamespace
    logits, boxes, order, masks = _outputs(6, b=1)
    cut = np.array([0.3, 0.9, 0.5, 0.2, 0.6, 0.99], np.float32)
    got = detections((logits, boxes, order, masks), [(800, 600)], cut, LayoutPreprocessConfig(height=SIZE, width=SIZE))[0]
    ref = reference_postprocessor("v3", SIZE)
    checked = 0
    for label in (0, 3):
        want = ref.post_process_object_detection(
            SimpleNamespace(logits=torch.tensor(logits), pred_boxes=torch.tensor(boxes),
                            order_logits=torch.tensor(order), out_masks=torch.tensor(masks)),
            threshold=float(cut[label]), target_sizes=[(800, 600)])[0]
        for poly, lab, order_rank in zip(want["polygon_points"], want["labels"].tolist(), want["order_seq"].tolist()):
            if lab != label:
                continue
            mine = [p for p, l, o in zip(got["polygon_points"], got["labels"], got["order_seq"])
                    if l == lab and o == order_rank]
            np.testing.assert_allclose(np.asarray(mine[0], np.float64), np.asarray(poly, np.float64), atol=1e-9)
            checked += 1
    assert checked >= 4
