"""PP-DocLayoutV2 end to end (transformers' PPDocLayoutV2ForObjectDetection: the shared detector, the per-class
thresholds, kept queries first, the reading-order network) on tiny configs with random weights, and a transformers
save_pretrained folder loaded strictly."""

import numpy as np
import pytest

from ms_ocr.layout.pp_doclayout_v2.config import PPDocLayoutV2Config
from bench.real_size import randomize_with_stats_
from tests.helpers.native import bound
from tests.helpers.parity import rel_err
from tests.layout.pp_doclayout_v2.test_reading_order import TINY as RO
from tests.layout.test_detector import TINY


def test_end_to_end_with_reading_order(graph_mode, monkeypatch):
    """PPDocLayoutV2ForObjectDetection: logits, boxes and order logits in the kept-first order (the reference's
    argsort made stable, see model.py), plus the decoded reading order."""
    import mindspore as ms
    import torch
    from transformers import PPDocLayoutV2Config as RefConfig
    from transformers import PPDocLayoutV2ForObjectDetection
    from ms_ocr.layout.postprocess import order_from_logits
    from ms_ocr.layout.pp_doclayout_v2.model import PPDocLayoutV2
    raw = dict(TINY, reading_order_config=dict(RO, num_classes=5), class_thresholds=[0.75, 0.7, 0.8, 0.75, 0.72],
               class_order=[3, 0, 4, 1, 2])
    ref = PPDocLayoutV2ForObjectDetection(RefConfig(**raw)).eval()
    randomize_with_stats_(ref, 11)
    ours = bound(PPDocLayoutV2(PPDocLayoutV2Config.from_dict(raw)))
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
    logits, boxes, order, kept = ours(ms.Tensor(x), *ours.host_inputs(128, 96))
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
    from ms_ocr.layout import load_model
    raw = dict(TINY, reading_order_config=dict(RO, num_classes=5))
    ref = PPDocLayoutV2ForObjectDetection(RefConfig(**raw)).eval()
    randomize_with_stats_(ref, 13)
    ref.save_pretrained(tmp_path)
    names = set(load_file(str(tmp_path / "model.safetensors")))
    assert any(".out_proj." in n for n in names) and any("encoder.encoder.0.layers" in n for n in names)
    spec, cfg, ours = load_model(str(tmp_path))
    assert spec.model_type == "pp_doclayout_v2"
    x = np.random.default_rng(3).uniform(0, 1, (1, 3, 96, 128)).astype(np.float32)
    stable = torch.argsort
    try:
        torch.argsort = lambda t, dim=-1, descending=False: stable(t, dim=dim, descending=descending, stable=True)
        with torch.no_grad():
            out = ref(torch.tensor(x))
    finally:
        torch.argsort = stable
    logits, boxes, order, _ = ours(ms.Tensor(x), *ours.host_inputs(96, 128))
    assert rel_err(logits.asnumpy(), out.logits.numpy()) < 1e-4
    assert rel_err(order.asnumpy(), out.order_logits.numpy()) < 1e-4
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["model.extra.weight"] = np.zeros(2, np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="model.extra.weight"):
        load_model(str(tmp_path))
