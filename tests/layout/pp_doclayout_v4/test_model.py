"""PP-DocLayoutV4 against transformers 5.25 on a tiny config with random weights and batch-norm statistics: the order
heads (successor, relative with the S2R closure), the page-geometry head, the whole model (class logits, quads, both
order logits, warp params) with and without the geometry head; a save_pretrained folder (the original reading-order
names) loaded strictly."""

import numpy as np
import pytest

from tests.helpers.native import bound
from tests.helpers.parity import rel_err
from tests.helpers.tiny_layout import CONFIG_V4, load_reference_state, tiny_reference_model


def test_order_heads_match_reference(graph_mode):
    import mindspore as ms
    import torch
    from ms_ocr.layout.pp_doclayout_v4 import PPDocLayoutV4Config
    from ms_ocr.layout.pp_doclayout_v4.heads import RelativeOrderHead, SuccessorOrderHead
    decoder = tiny_reference_model("v4", 4).model.decoder
    cfg = PPDocLayoutV4Config.from_dict(CONFIG_V4)
    succ, rel = bound(SuccessorOrderHead(cfg)), bound(RelativeOrderHead(cfg))
    load_reference_state(succ, decoder.successor_order_head.state_dict())
    load_reference_state(rel, decoder.relative_order_head.state_dict())
    assert abs(float(decoder.relative_order_head.s2r_fusion.closure_weight.detach()) - 1) < 0.5  # the closure counts
    x = np.random.default_rng(1).standard_normal((2, cfg.num_queries, cfg.d_model)).astype(np.float32)
    with torch.no_grad():
        want_s = decoder.successor_order_head(torch.tensor(x))
        want_r = decoder.relative_order_head(torch.tensor(x), want_s)
    got_s = succ(ms.Tensor(x))
    got_r = rel(ms.Tensor(x), got_s)
    assert rel_err(got_s.asnumpy(), want_s.numpy()) < 1e-5
    assert rel_err(got_r.asnumpy(), want_r.numpy()) < 1e-5
    np.testing.assert_allclose(got_r.asnumpy(), -got_r.asnumpy().transpose(0, 2, 1), atol=1e-5)  # antisymmetric


def test_geometry_head_matches_reference(graph_mode):
    """PPDocLayoutV4DeformHead: coordinates appended, dilated convs, attention pooling, roll wrapped to
    [-180, 180), quadrant probability, shear, kx, ky."""
    import mindspore as ms
    import torch
    from ms_ocr.layout.pp_doclayout_v4 import PPDocLayoutV4Config
    from ms_ocr.layout.pp_doclayout_v4.heads import DeformHead
    head = tiny_reference_model("v4", 6).model.deform_head
    ours = bound(DeformHead(PPDocLayoutV4Config.from_dict(CONFIG_V4)))
    load_reference_state(ours, head.state_dict())
    feats = np.random.default_rng(2).standard_normal((3, 32, 7, 9)).astype(np.float32) * 3
    with torch.no_grad():
        want = head(torch.tensor(feats)).numpy()
    got = ours(ms.Tensor(feats), DeformHead.coordinates(7, 9)).asnumpy()
    assert got.shape == want.shape == (3, 5)
    assert np.all(got[:, 0] >= -180) and np.all(got[:, 0] < 180)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("geometry,size", [(True, (128, 96)), (True, (96, 160)), (False, (128, 96))])
def test_model_matches_reference(graph_mode, geometry, size):
    import mindspore as ms
    import torch
    from ms_ocr.layout.pp_doclayout_v4 import PPDocLayoutV4, PPDocLayoutV4Config
    ref = tiny_reference_model("v4", 11, deform_pred=geometry)
    ours = bound(PPDocLayoutV4(PPDocLayoutV4Config.from_dict(dict(CONFIG_V4, deform_pred=geometry))))
    load_reference_state(ours, {k: v for k, v in ref.state_dict().items()
                       if not k.endswith("num_batches_tracked") and "denoising" not in k})
    x = np.random.default_rng(size[0]).uniform(0, 1, (1, 3) + size).astype(np.float32)
    with torch.no_grad():
        out = ref(torch.tensor(x))
    got = [t.asnumpy() for t in ours(ms.Tensor(x), *ours.host_inputs(*size))]
    names = ("logits", "pred_boxes", "relative_order_logits", "successor_order_logits") + (
        ("warp_params",) if geometry else ())
    assert len(got) == len(names)
    for g, name in zip(got, names):
        want = getattr(out, name).numpy()
        assert g.shape == want.shape
        assert rel_err(g, want) < 1e-4, name
    assert got[1].shape[-1] == 10


def test_save_pretrained_folder_loads_strictly(graph_mode, tmp_path):
    """save_pretrained writes the original names (decoder_roor_order_head, decoder_global_pointer, s2r_fusion.a,
    RT-DETR's out_proj / fc1 / encoder.encoder): every key is used and the outputs are the reference's; a missing
    or an extra key is an error naming it."""
    import mindspore as ms
    import torch
    from safetensors.numpy import load_file, save_file
    from ms_ocr.config_utils import CheckpointError
    from ms_ocr.layout import load_model
    ref = tiny_reference_model("v4", 13)
    ref.save_pretrained(tmp_path)
    path = str(tmp_path / "model.safetensors")
    tensors = load_file(path)
    for name in ("model.s2r_fusion.a", "model.decoder_roor_order_head.1.weight", "model.decoder_global_pointer.q_proj.bias",
                 "model.decoder_roor_global_pointer.k_proj.weight", "model.deform_head.bin_centers"):
        assert name in tensors
    spec, cfg, ours = load_model(str(tmp_path))
    assert spec.model_type == "pp_doclayout_v4" and cfg.d_model == 32 and cfg.deform_pred
    x = np.random.default_rng(3).uniform(0, 1, (1, 3, 96, 128)).astype(np.float32)
    with torch.no_grad():
        out = ref(torch.tensor(x))
    got = ours(ms.Tensor(x), *ours.host_inputs(96, 128))
    assert rel_err(got[2].asnumpy(), out.relative_order_logits.numpy()) < 1e-4
    save_file(dict(tensors, **{"model.extra.weight": np.zeros(2, np.float32)}), path)
    with pytest.raises(CheckpointError, match="model.extra.weight"):
        load_model(str(tmp_path))
    save_file({k: v for k, v in tensors.items() if k != "model.s2r_fusion.a"}, path)
    with pytest.raises(CheckpointError, match="s2r_fusion.closure_weight"):
        load_model(str(tmp_path))
