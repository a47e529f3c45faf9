"""PP-DocLayoutV3 against transformers 5.25 on a tiny config with random weights and batch-norm statistics: the mask
branch of the encoder, the mask boxes, and the whole model (class logits, boxes, order logits, masks) for two input
sizes, with tied and untied heads; a save_pretrained folder loaded strictly."""

import numpy as np
import pytest

from tests.helpers.native import bound
from tests.helpers.parity import rel_err
from tests.helpers.tiny_layout import load_reference_state, tiny_reference_model


def test_mask_branch_matches_reference(graph_mode):
    """PPDocLayoutV3HybridEncoder (AIFI, FPN/PAN, mask feature FPN with bilinear x2 steps, the stride-4 lateral):
    the fused maps and the mask prototypes."""
    import mindspore as ms
    import torch
    from ms_ocr.layout.pp_doclayout_v3.config import PPDocLayoutV3Config
    from ms_ocr.layout.pp_doclayout_v3.mask_head import MaskHybridEncoder
    from tests.helpers.tiny_layout import CONFIG_V3
    ref = tiny_reference_model("v3", 3).model.encoder
    ours = bound(MaskHybridEncoder(PPDocLayoutV3Config.from_dict(CONFIG_V3)))
    load_reference_state(ours, {k: v for k, v in ref.state_dict().items() if not k.endswith("num_batches_tracked")})
    rng = np.random.default_rng(2)
    h, w = 12, 16  # the stride-8 map of a 96 x 128 input
    feats = [rng.standard_normal((1, 32, h // s, w // s)).astype(np.float32) for s in (1, 2, 4)]
    x4 = rng.standard_normal((1, 16, 2 * h, 2 * w)).astype(np.float32)
    with torch.no_grad():
        out = ref([torch.tensor(f) for f in feats], x4_feat=[torch.tensor(x4)])
    pos = (ours.position(h // 4, w // 4),)
    maps, prototypes = ours(tuple(ms.Tensor(f) for f in feats), pos, ms.Tensor(x4))
    for g, x in zip(maps, out.last_hidden_state):
        assert rel_err(g.asnumpy(), x.numpy()) < 1e-5
    assert prototypes.shape == tuple(out.mask_feat.shape) == (1, 8, 24, 32)
    assert rel_err(prototypes.asnumpy(), out.mask_feat.numpy()) < 1e-5


def test_mask_boxes_match_reference(graph_mode):
    import mindspore as ms
    import torch
    from transformers.models.pp_doclayout_v3.modeling_pp_doclayout_v3 import mask_to_box_coordinate
    from ms_ocr.layout.pp_doclayout_v3.mask_head import mask_to_box
    rng = np.random.default_rng(0)
    masks = rng.standard_normal((2, 6, 20, 28)).astype(np.float32) > 1.2
    masks[0, 0] = False  # an empty mask: zeros
    masks[1, 2] = False
    masks[1, 2, 3:9, 27] = True  # one column on the right edge
    want = mask_to_box_coordinate(torch.tensor(masks), torch.float32).numpy()
    got = mask_to_box(ms.Tensor(masks)).asnumpy()
    assert np.array_equal(got[0, 0], np.zeros(4)) and abs(want[1, 2, 2] - 1 / 28) < 1e-6
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)


@pytest.mark.parametrize("tied,size", [(True, (128, 96)), (True, (96, 160)), (False, (128, 96))])
def test_model_matches_reference(graph_mode, tied, size):
    """PPDocLayoutV3ForObjectDetection: logits, pred_boxes, order_logits and out_masks (the last layer's), in query
    order; the masks binarise alike wherever the reference's logit is not within 1e-4 of 0."""
    import mindspore as ms
    import torch
    from ms_ocr.layout.pp_doclayout_v3 import PPDocLayoutV3, PPDocLayoutV3Config
    from tests.helpers.tiny_layout import CONFIG_V3
    ref = tiny_reference_model("v3", 11, tie_word_embeddings=tied)
    ours = bound(PPDocLayoutV3(PPDocLayoutV3Config.from_dict(dict(CONFIG_V3, tie_word_embeddings=tied))))
    state = {k: v for k, v in ref.state_dict().items() if not k.endswith("num_batches_tracked") and "denoising" not in k
             and not (tied and (".decoder.class_embed." in k or ".decoder.bbox_embed." in k))}
    load_reference_state(ours, state)
    x = np.random.default_rng(size[0]).uniform(0, 1, (1, 3) + size).astype(np.float32)
    with torch.no_grad():
        out = ref(torch.tensor(x))
    got = [t.asnumpy() for t in ours(ms.Tensor(x), *ours.host_inputs(*size))]
    for g, name in zip(got, ("logits", "pred_boxes", "order_logits", "out_masks")):
        want = getattr(out, name).numpy()
        assert g.shape == want.shape
        assert rel_err(g, want) < 1e-4, name
    masks = out.out_masks.numpy()
    clear = np.abs(masks) > 1e-4 * np.abs(masks).max()
    assert clear.mean() > 0.99 and np.array_equal((got[3] > 0)[clear], (masks > 0)[clear])
    assert 0.05 < (masks > 0).mean() < 0.95  # the masks are not all one sign


def test_save_pretrained_folder_loads_strictly(graph_mode, tmp_path):
    """A transformers save_pretrained folder (RT-DETR names; the tied decoder heads not written) loads with every
    key used and gives the reference's outputs; a missing or an extra key is an error naming it; a file that also
    carries the tied decoder heads (as a hub file may) loads, those keys dropped."""
    import mindspore as ms
    import torch
    from safetensors.numpy import load_file, save_file
    from ms_ocr.config_utils import CheckpointError
    from ms_ocr.layout import load_model
    ref = tiny_reference_model("v3", 13)
    ref.save_pretrained(tmp_path)
    path = str(tmp_path / "model.safetensors")
    tensors = load_file(path)
    assert "model.encoder.encoder.0.layers.0.fc1.weight" in tensors and "model.decoder.class_embed.weight" not in tensors
    spec, cfg, ours = load_model(str(tmp_path))
    assert spec.model_type == "pp_doclayout_v3" and cfg.tie_word_embeddings
    x = np.random.default_rng(3).uniform(0, 1, (1, 3, 96, 128)).astype(np.float32)
    with torch.no_grad():
        want = ref(torch.tensor(x)).logits.numpy()
    assert rel_err(ours(ms.Tensor(x), *ours.host_inputs(96, 128))[0].asnumpy(), want) < 1e-4
    tied = dict(tensors, **{"model.decoder.class_embed.weight": tensors["model.enc_score_head.weight"],
                            "model.decoder.class_embed.bias": tensors["model.enc_score_head.bias"]})
    save_file(tied, path)
    load_model(str(tmp_path))
    save_file(dict(tensors, **{"model.extra.weight": np.zeros(2, np.float32)}), path)
    with pytest.raises(CheckpointError, match="model.extra.weight"):
        load_model(str(tmp_path))
    save_file({k: v for k, v in tensors.items() if k != "model.mask_query_head.layers.2.bias"}, path)
    with pytest.raises(CheckpointError, match="mask_query_head.layers.2.bias"):
        load_model(str(tmp_path))
