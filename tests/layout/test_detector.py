"""The shared RT-DETR detector as PP-DocLayoutV2 runs it (backbone -> projections -> hybrid encoder -> query
selection -> decoder) against transformers' PPDocLayoutV2Model on a tiny config with random weights: last-layer class
logits and refined boxes, for a portrait and a landscape input; the anchors (boxes and V4's quads) against the
references'."""

import numpy as np
import pytest

from ms_ocr.layout.detector import Detector, anchors
from ms_ocr.layout.pp_doclayout_v2.config import PPDocLayoutV2Config
from bench.real_size import randomize_with_stats_
from tests.helpers.native import bound
from tests.helpers.parity import rel_err
from tests.layout.test_backbone import TINY as BACKBONE

LABELS = {i: f"c{i}" for i in range(5)}
TINY = dict(backbone_config=dict(BACKBONE, model_type="hgnet_v2"), encoder_in_channels=[32, 48, 64],
            encoder_hidden_dim=32, encoder_ffn_dim=48, num_attention_heads=4, d_model=32,
            decoder_in_channels=[32, 32, 32], decoder_ffn_dim=48, decoder_layers=2, decoder_attention_heads=4,
            num_queries=20, id2label=LABELS, class_thresholds=[0.5] * 5, class_order=[0, 1, 2, 3, 4])


@pytest.fixture(scope="module")
def pair(graph_mode):
    import mindspore as ms
    from transformers import PPDocLayoutV2Config as RefConfig
    from transformers import PPDocLayoutV2ForObjectDetection
    ref = PPDocLayoutV2ForObjectDetection(RefConfig(**TINY)).eval()
    randomize_with_stats_(ref, 9)
    ours = bound(Detector(PPDocLayoutV2Config.from_dict(TINY)))
    state = {k[len("model."):]: v for k, v in ref.state_dict().items()
             if k.startswith("model.") and not k.endswith("num_batches_tracked") and "denoising" not in k}
    params = dict(ours.parameters_and_names())
    assert sorted(params) == sorted(state)
    for name, p in params.items():
        p.set_data(ms.Tensor(state[name].numpy()))
    return ref, ours


@pytest.mark.parametrize("size", [(128, 96), (96, 160)])
def test_detector_matches_reference(pair, size):
    import mindspore as ms
    import torch
    ref, ours = pair
    x = np.random.default_rng(size[0]).uniform(0, 1, (1, 3) + size).astype(np.float32)
    with torch.no_grad():
        out = ref.model(torch.tensor(x))
    want_logits = out.intermediate_logits[:, -1].numpy()
    want_boxes = out.intermediate_reference_points[:, -1].numpy()
    pos, a, valid, shapes = ours.host_inputs(*size)
    logits, boxes = ours(ms.Tensor(x), pos, a, valid, shapes)
    assert rel_err(logits.asnumpy(), want_logits) < 1e-4
    assert rel_err(boxes.asnumpy(), want_boxes) < 1e-4


def test_anchors_match_reference():
    import torch
    from transformers.models.pp_doclayout_v2.modeling_pp_doclayout_v2 import PPDocLayoutV2Model
    shapes = ((100, 60), (50, 30), (25, 15))  # an 800x480 input: level-0 and level-1 borders are invalid
    want_a, want_v = PPDocLayoutV2Model._cached_generate_anchors(shapes, 0.05, "cpu", torch.float32)
    got_a, got_v = anchors(shapes)
    assert np.array_equal(got_v, want_v.numpy()) and 0 < got_v.sum() < got_v.size
    np.testing.assert_allclose(got_a, want_a.numpy(), rtol=1e-6, atol=1e-6)  # log of float32: ulp-level


def test_quad_anchors_match_reference():
    """PP-DocLayoutV4's 10-number anchors (centre + the corners of a square per level, in logit space)."""
    import torch
    from transformers.models.pp_doclayout_v4.modeling_pp_doclayout_v4 import PPDocLayoutV4Model
    shapes = ((100, 60), (50, 30), (25, 15))
    want_a, want_v = PPDocLayoutV4Model._cached_generate_anchors(shapes, 0.05, "cpu", torch.float32)
    got_a, got_v = anchors(shapes, quads=True)
    assert got_a.shape == tuple(want_a.shape) == (1, 7875, 10)
    assert np.array_equal(got_v, want_v.numpy()) and 0 < got_v.sum() < got_v.size
    np.testing.assert_allclose(got_a, want_a.numpy(), rtol=1e-6, atol=1e-6)
