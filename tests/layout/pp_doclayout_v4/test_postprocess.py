"""PP-DocLayoutV4's post-processing against the reference class's own methods (tests/helpers/layout_reference.py):
the reading-order decoding over kept boxes (successor graphs with cycles, several components, ties) and the whole
post_process_object_detection (quads in page pixels, their boxes, the order, the geometry passed through)."""

import numpy as np
import pytest

from ms_ocr.layout.pp_doclayout_v4.order import decode_order
from ms_ocr.layout.pp_doclayout_v4.postprocess import detections
from tests.helpers.layout_reference import reference_postprocessor


def _logits(rng, n, density):
    successor = rng.normal(-1.0, 1.5, (n, n)).astype(np.float32)
    successor[rng.uniform(size=(n, n)) > density] = -3.0  # sparse successor edges: several components
    np.fill_diagonal(successor, -1e4)
    relative = rng.normal(0, 2, (n, n)).astype(np.float32)
    return relative - relative.T, successor


@pytest.mark.parametrize("n,density,seed", [(1, 0.5, 0), (2, 1.0, 1), (7, 0.6, 2), (15, 0.3, 3), (30, 0.15, 4),
                                            (40, 0.5, 5)])
def test_reading_order_matches_reference(n, density, seed):
    ref = reference_postprocessor("v4")
    relative, successor = _logits(np.random.default_rng(seed), n, density)
    got = decode_order(relative, successor)
    want = ref._decode_reading_order(relative, successor)
    assert got.tolist() == np.asarray(want).tolist()
    assert sorted(got.tolist()) == list(range(n))


def test_cycles_are_broken_at_their_weakest_edge():
    """0 -> 1 -> 2 -> 0 with 2 -> 0 the weakest: the chain 0, 1, 2 (and the reference agrees)."""
    successor = np.full((4, 4), -5.0, np.float32)
    successor[0, 1], successor[1, 2], successor[2, 0] = 3.0, 2.0, 0.5
    relative = np.zeros((4, 4), np.float32)
    relative[3] = -1.0  # node 3 alone, read last
    relative[:, 3] = 1.0
    relative[3, 3] = 0.0
    got = decode_order(relative, successor)
    assert got.tolist() == [0, 1, 2, 3] == np.asarray(reference_postprocessor("v4")._decode_reading_order(
        relative, successor)).tolist()


@pytest.mark.parametrize("threshold", [0.5, 0.3])
def test_detections_match_reference(threshold):
    import torch
    from types import SimpleNamespace
    rng = np.random.default_rng(7)
    b, q, c = 2, 30, 6
    logits = rng.normal(-0.5, 2.0, (b, q, c)).astype(np.float32)
    logits[0, 3, 1], logits[0, 3, 4] = 4.0, 3.5  # one query kept with two labels: one rank
    quads = rng.uniform(0.05, 0.95, (b, q, 10)).astype(np.float32)
    order = [_logits(rng, q, 0.2) for _ in range(b)]
    relative = np.stack([o[0] for o in order])
    successor = np.stack([o[1] for o in order])
    warp = rng.normal(0, 1, (b, 5)).astype(np.float32)
    sizes = [(1024, 768), (600, 900)]
    want = reference_postprocessor("v4").post_process_object_detection(
        SimpleNamespace(logits=torch.tensor(logits), pred_boxes=torch.tensor(quads),
                        relative_order_logits=torch.tensor(relative), successor_order_logits=torch.tensor(successor),
                        warp_params=torch.tensor(warp)), threshold=threshold, target_sizes=sizes)
    got = detections((logits, quads, relative, successor, warp), sizes, threshold)
    for g, w in zip(got, want):
        assert len(g["scores"]) == len(w["scores"]) > 5
        assert g["order_seq"].tolist() == w["order_seq"].tolist()  # the reference sorts stably
        key_g = np.lexsort((g["labels"], g["order_seq"]))
        key_w = np.lexsort((w["labels"].numpy(), w["order_seq"].numpy()))
        assert g["labels"][key_g].tolist() == w["labels"].numpy()[key_w].tolist()
        np.testing.assert_allclose(g["scores"][key_g], w["scores"].numpy()[key_w], rtol=1e-6)
        np.testing.assert_allclose(g["polygon_points"][key_g], w["polygon_points"].numpy()[key_w], rtol=1e-6, atol=1e-3)
        np.testing.assert_allclose(g["boxes"][key_g], w["boxes"].numpy()[key_w], rtol=1e-6, atol=1e-3)
        np.testing.assert_array_equal(g["warp_params"], w["warp_params"].numpy())
    assert (got[0]["labels"] == 1).any() and (got[0]["labels"] == 4).any()
