"""LayoutDetector end to end on tiny PP-DocLayoutV3 and V4 folders (transformers save_pretrained, the hub's 25
labels, preprocessor_config.json) against the reference chain: the reference processor's pixels, the reference
model, its post_process_object_detection with the page as target size. Labels and reading order equal, scores to
1e-4, boxes and points (V3's mask polygons, V4's quadrilaterals) within 1 px, both clipped to the page; V4's page
geometry. Then what the runner adds: the model_type picks the version, an unknown one is refused in one line."""

import json

import numpy as np
import pytest

from bench.layout import reference_pixels
from tests.helpers.layout_reference import assert_same_detections, reference_postprocessor
from tests.helpers.parity import rel_err
from tests.helpers.tiny_layout import LABELS, SIZE, blocks_page, make_tiny_checkpoint


@pytest.mark.parametrize("version,size", [("v3", (612, 792)), ("v3", (1000, 700)), ("v4", (612, 792)),
                                          ("v4", (1000, 700))])
def test_detect_matches_reference_chain(graph_mode, tmp_path, version, size):
    import torch
    from types import SimpleNamespace
    from ms_ocr.layout import LayoutDetector
    folder = str(tmp_path)
    ref = make_tiny_checkpoint(folder, version, seed=5, **({"mask_gain": 16.0} if version == "v3" else {}))
    page = blocks_page(*size)
    w, h = size
    with torch.no_grad():
        out = ref(torch.tensor(reference_pixels(page, SIZE, SIZE, version)))
    cut = float(torch.topk(torch.sigmoid(out.logits).flatten(), 12).values[-1]) - 1e-6  # about a dozen boxes pass
    fields = dict(logits=out.logits, pred_boxes=out.pred_boxes)
    if version == "v3":
        fields.update(order_logits=out.order_logits, out_masks=out.out_masks)
    else:
        fields.update(relative_order_logits=out.relative_order_logits,
                      successor_order_logits=out.successor_order_logits, warp_params=out.warp_params)
    want = reference_postprocessor(version, SIZE).post_process_object_detection(
        SimpleNamespace(**fields), threshold=cut, target_sizes=[(h, w)])[0]
    det = LayoutDetector(folder, threshold=cut)
    assert det.labels == LABELS and det.spec.model_type == f"pp_doclayout_{version}"
    result = det.analyze(page)
    got = result.blocks
    assert_same_detections(got, want, w, h, 10)
    if version == "v4":
        assert list(result.warp) == ["roll", "quadrant_confidence", "shear", "kx", "ky"]
        np.testing.assert_allclose(list(result.warp.values()), out.warp_params[0].numpy(), rtol=1e-4, atol=1e-4)
        assert all(len(b.points) == 4 for b in got)
    else:
        assert result.warp is None and any(len(b.points) != 4 for b in got)  # traced outlines, not only boxes
    names = det.output_names
    assert rel_err(result.outputs[0], out.logits.numpy()) < 1e-4 and names[0] == "logits"
    assert json.loads(json.dumps([b.as_dict() for b in got]))[0]["points"]


def test_model_type_decides_and_unknown_is_refused(tmp_path):
    from ms_ocr.config_utils import CheckpointError
    from ms_ocr.layout import config_from_dir
    for version, cls in (("pp_doclayout_v3", "PPDocLayoutV3Config"), ("pp_doclayout_v4", "PPDocLayoutV4Config")):
        (tmp_path / "config.json").write_text(json.dumps({"model_type": version}))
        spec, cfg = config_from_dir(str(tmp_path))
        assert spec.model_type == version and type(cfg).__name__ == cls
        assert (cfg.d_model, cfg.num_queries, cfg.decoder_layers, cfg.encoder_in_channels) == (256, 300, 6,
                                                                                                [512, 1024, 2048])
    assert cfg.backbone.out_features == ["stage2", "stage3", "stage4"] and not cfg.deform_pred
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "rt_detr"}))
    with pytest.raises(CheckpointError) as err:
        config_from_dir(str(tmp_path))
    assert "\n" not in str(err.value) and "model_type 'rt_detr' is not a layout model" in str(err.value)
    assert "pp_doclayout_v2, pp_doclayout_v3, pp_doclayout_v4" in str(err.value)
