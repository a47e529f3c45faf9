"""The whole RT-DETR detector of PP-DocLayoutV2 (backbone -> projections -> hybrid encoder -> query selection ->
decoder) against transformers' PPDocLayoutV2Model on a tiny config with random weights: last-layer class logits
and refined boxes, for a portrait and a landscape input."""

import numpy as np
import pytest

from ms_ocr.models.pp_doclayout_v2.config import PPDocLayoutV2Config
from ms_ocr.models.pp_doclayout_v2.detector import Detector, anchors
from tests.helpers.parity import randomize_with_stats_, rel_err
from tests.models.pp_doclayout_v2.test_backbone import TINY as BACKBONE

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
    ours = Detector(PPDocLayoutV2Config.from_dict(TINY))
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


def test_end_to_end_with_reading_order(graph_mode, monkeypatch):
    """PPDocLayoutV2ForObjectDetection: logits, boxes and order logits in the kept-first order (the reference's
    argsort made stable, see model.py), plus the decoded reading order."""
    import mindspore as ms
    import torch
    from transformers import PPDocLayoutV2Config as RefConfig
    from transformers import PPDocLayoutV2ForObjectDetection
    from ms_ocr.models.pp_doclayout_v2.model import PPDocLayoutV2
    from ms_ocr.models.pp_doclayout_v2.reading_order import order_from_logits
    from tests.models.pp_doclayout_v2.test_reading_order import TINY as RO
    raw = dict(TINY, reading_order_config=dict(RO, num_classes=5), class_thresholds=[0.75, 0.7, 0.8, 0.75, 0.72],
               class_order=[3, 0, 4, 1, 2])
    ref = PPDocLayoutV2ForObjectDetection(RefConfig(**raw)).eval()
    randomize_with_stats_(ref, 11)
    ours = PPDocLayoutV2(PPDocLayoutV2Config.from_dict(raw))
    state = {k: v for k, v in ref.state_dict().items() if not k.endswith("num_batches_tracked")
             and "denoising" not in k and "rel_pos_x_bias" not in k and "rel_pos_y_bias" not in k}
    params = dict(ours.parameters_and_names())
    assert sorted(params) == sorted(state)
    for name, p in params.items():
        p.set_data(ms.Tensor(state[name].numpy()))
    stable = torch.argsort
    monkeypatch.setattr(torch, "argsort", lambda x, dim=-1, descending=False: stable(x, dim=dim, descending=descending,
                                                                                    stable=True))
    x = np.random.default_rng(7).uniform(0, 1, (1, 3, 128, 96)).astype(np.float32)
    with torch.no_grad():
        # thresholds at the median query score, so about half the queries are kept (random weights score high)
        probs = torch.sigmoid(ref.model(torch.tensor(x)).intermediate_logits[0, -1].max(-1).values)
        cut = float(probs.median()) + 1e-6
        ref.config.class_thresholds = [cut] * 5
        ours.thresholds = ms.Tensor(np.full(5, cut, np.float32))
        out = ref(torch.tensor(x))
    logits, boxes, order, kept = ours(ms.Tensor(x), *ours.model.host_inputs(128, 96))
    n = int(kept.asnumpy().sum())
    assert 0 < n < 20  # some queries kept, some not: the kept-first reordering matters
    assert rel_err(logits.asnumpy(), out.logits.numpy()) < 1e-4
    assert rel_err(boxes.asnumpy(), out.pred_boxes.numpy()) < 1e-4
    assert rel_err(order.asnumpy(), out.order_logits.numpy()) < 1e-4
    got_rank = order_from_logits(order.asnumpy())[0, :n]
    want_rank = order_from_logits(out.order_logits.numpy())[0, :n]
    assert got_rank.tolist() == want_rank.tolist()


def test_save_pretrained_checkpoint_loads_strictly_and_matches(graph_mode, tmp_path):
    """A transformers save_pretrained folder (original RT-DETR names: out_proj, fc1/fc2, encoder.encoder.N) loads
    with every key consumed, and the loaded model gives the reference's outputs; an extra key is an error."""
    import mindspore as ms
    import torch
    from safetensors.numpy import load_file, save_file
    from transformers import PPDocLayoutV2Config as RefConfig
    from transformers import PPDocLayoutV2ForObjectDetection
    from ms_ocr.config_utils import CheckpointError
    from ms_ocr.models.pp_doclayout_v2 import load_model
    from tests.models.pp_doclayout_v2.test_reading_order import TINY as RO
    raw = dict(TINY, reading_order_config=dict(RO, num_classes=5))
    ref = PPDocLayoutV2ForObjectDetection(RefConfig(**raw)).eval()
    randomize_with_stats_(ref, 13)
    ref.save_pretrained(tmp_path)
    names = set(load_file(str(tmp_path / "model.safetensors")))
    assert any(".out_proj." in n for n in names) and any("encoder.encoder.0.layers" in n for n in names)
    cfg, ours = load_model(str(tmp_path))
    x = np.random.default_rng(3).uniform(0, 1, (1, 3, 96, 128)).astype(np.float32)
    stable = torch.argsort
    try:
        torch.argsort = lambda t, dim=-1, descending=False: stable(t, dim=dim, descending=descending, stable=True)
        with torch.no_grad():
            out = ref(torch.tensor(x))
    finally:
        torch.argsort = stable
    logits, boxes, order, _ = ours(ms.Tensor(x), *ours.model.host_inputs(96, 128))
    assert rel_err(logits.asnumpy(), out.logits.numpy()) < 1e-4
    assert rel_err(order.asnumpy(), out.order_logits.numpy()) < 1e-4
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["model.extra.weight"] = np.zeros(2, np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="model.extra.weight"):
        load_model(str(tmp_path))
