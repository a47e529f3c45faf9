"""PP-DocLayoutV3 and V4 at the reference's real configuration (HGNetV2-L, 300 queries, 6 decoder layers; V4 with its
page-geometry head), random weights and statistics, saved by transformers: LayoutDetector (the staged graphs) against
transformers 5.25 on an 800x800 page (the processor's own size: the resize is the identity): every raw output to
1e-4 of its largest value, then the detections (labels and reading order equal, boxes and points within 1 px).

Queries whose encoder scores tie to float rounding (8,400 candidates for 300 places) can leave the top-k in either
order; the decoder treats its queries alike, so such a pair comes out swapped: outputs are compared per query after
matching each reference query to ours (a few swaps, checked to be a permutation; V3's order logits, masked by
query position, on the queries left in place)."""

import numpy as np
import pytest

from bench.layout import reference_pixels
from tests.helpers.layout_reference import assert_same_detections, reference_postprocessor
from tests.helpers.parity import rel_err
from tests.helpers.tiny_layout import blocks_page

FIELDS = {"v3": ("logits", "pred_boxes", "order_logits", "out_masks"),
          "v4": ("logits", "pred_boxes", "relative_order_logits", "successor_order_logits", "warp_params")}


def _query_order(got, want):
    """Our query for each reference query: rows of (logits, boxes) matched to the nearest, a permutation."""
    d = np.abs(got[:, None, :] - want[None, :, :]).max(-1)
    perm = d.argmin(0)
    assert sorted(perm.tolist()) == list(range(len(perm)))
    return perm


@pytest.mark.slow
@pytest.mark.parametrize("version", ["v3", "v4"])
def test_real_config_matches_reference(graph_mode, tmp_path, version):
    import torch
    from types import SimpleNamespace
    from ms_ocr.layout import LayoutDetector
    from bench.real_size import make_pp_doclayout
    ref = make_pp_doclayout(str(tmp_path), version, seed=1, stats=True)
    if version == "v3":
        with torch.no_grad():  # masks that pass the threshold in parts, as trained ones do
            for t in ref.model.mask_query_head.layers[-1].parameters():
                t.mul_(16.0)
        ref.save_pretrained(str(tmp_path))
    page = blocks_page(800, 800, blocks=20, seed=8)
    with torch.no_grad():
        out = ref(torch.tensor(reference_pixels(page, 800, 800, version)))
    cut = float(torch.topk(torch.sigmoid(out.logits).flatten(), 25).values[-1]) - 1e-6  # a page's worth of boxes
    det = LayoutDetector(str(tmp_path), threshold=cut)
    result = det.analyze(page)
    assert det.output_names == FIELDS[version]
    rows = [np.concatenate([o[0], b[0]], -1) for o, b in ((result.outputs[0], result.outputs[1]),
                                                          (out.logits.numpy(), out.pred_boxes.numpy()))]
    perm = _query_order(*rows)
    assert (perm != np.arange(len(perm))).sum() <= 12
    for got, name in zip(result.outputs, FIELDS[version]):
        want = getattr(out, name).numpy()
        assert got.shape == want.shape, name
        if name != "warp_params":
            got = got[:, perm][:, :, perm] if "order" in name else got[:, perm]
        if name == "order_logits":  # V3's pointer masks by position (j <= i): compare the queries left in place
            kept = perm == np.arange(len(perm))
            got, want = got[:, kept][:, :, kept], want[:, kept][:, :, kept]
        assert rel_err(got, want) < 1e-4, name
    want = reference_postprocessor(version, 800).post_process_object_detection(
        SimpleNamespace(**{name: getattr(out, name) for name in FIELDS[version]}), threshold=cut,
        target_sizes=[(800, 800)])[0]
    assert_same_detections(result.blocks, want, 800, 800, 20)
    if version == "v4":
        np.testing.assert_allclose(list(result.warp.values()), out.warp_params[0].numpy(), rtol=1e-4, atol=1e-4)
