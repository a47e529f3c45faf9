"""LayoutDetector end to end (hub-style folder: 25 labels, preprocessor_config.json) against the reference chain:
the reference processor's pixels, PPDocLayoutV2ForObjectDetection (argsort made stable, see model.py) and the
reference post-processing with page target sizes: labels, scores, boxes in page pixels and reading order."""

import numpy as np
import pytest
from PIL import Image, ImageDraw

from bench.layout import reference_pixels
from tests.helpers.layout_reference import reference_postprocessor
from tests.helpers.tiny_layout import LABELS, SIZE, tiny_layout_model


def _page(w, h):
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    rng = np.random.default_rng(w)
    for _ in range(12):
        x, y = int(rng.integers(0, w - 60)), int(rng.integers(0, h - 20))
        d.rectangle([x, y, x + int(rng.integers(20, 200)), y + int(rng.integers(5, 60))], fill=tuple(rng.integers(0, 200, 3).tolist()))
    return img


@pytest.mark.parametrize("size", [(612, 792), (1000, 700)])
def test_detect_matches_reference(layout_detector, size, monkeypatch):
    import torch
    from types import SimpleNamespace
    page = _page(*size)
    det = layout_detector
    assert det.labels == LABELS and (det.pcfg.height, det.pcfg.width) == (SIZE, SIZE)
    ref = tiny_layout_model()
    stable = torch.argsort
    try:
        torch.argsort = lambda t, dim=-1, descending=False: stable(t, dim=dim, descending=descending, stable=True)
        with torch.no_grad():
            out = ref(torch.tensor(reference_pixels(page, SIZE, SIZE)))
    finally:
        torch.argsort = stable
    scores = torch.sigmoid(out.logits).flatten()
    cut = float(torch.topk(scores, 12).values[-1]) - 1e-6  # about a dozen boxes pass (random weights)
    monkeypatch.setattr(det, "threshold", cut)
    want = reference_postprocessor().post_process_object_detection(
        SimpleNamespace(logits=out.logits, pred_boxes=out.pred_boxes, order_logits=out.order_logits),
        threshold=cut, target_sizes=[size[::-1]])[0]
    got = det.detect(page)
    assert len(got) == len(want["scores"]) >= 10
    w, h = size
    key = lambda labels, orders: sorted(zip(orders, labels))  # noqa: E731 - two labels of one query may swap
    assert key([b.label_id for b in got], [b.order for b in got]) == \
        key(want["labels"].tolist(), want["order_seq"].tolist())
    by = {(b.order, b.label_id): b for b in got}
    for s, lab, box, order in zip(want["scores"], want["labels"], want["boxes"], want["order_seq"]):
        b = by[(int(order), int(lab))]
        assert abs(b.score - float(s)) < 1e-4
        clipped = np.clip(box.numpy(), 0, [w, h, w, h])
        np.testing.assert_allclose(b.box, clipped, atol=1e-3 * max(w, h))
    assert [b.order for b in got] == sorted(b.order for b in got)


def test_eager_mode_gives_the_graph_outputs(layout_detector, layout_dir):
    """`mode="eager"` (op by op, no compiled pool) computes the same outputs and leaves graph mode on."""
    import mindspore as ms
    from ms_ocr.layout import LayoutDetector
    from ms_ocr.layout.processor import preprocess
    eager = LayoutDetector(layout_dir, mode="eager")
    pixels = preprocess(_page(612, 792), eager.pcfg)
    want = layout_detector.raw(pixels)
    got = eager.raw(pixels)
    assert ms.get_context("mode") == ms.GRAPH_MODE
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    assert want[3].sum() > 0  # some queries kept, so the order logits compare real boxes
    with pytest.raises(ValueError, match="unknown layout mode"):
        LayoutDetector(layout_dir, mode="fast")
