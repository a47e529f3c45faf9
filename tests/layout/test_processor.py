"""PP-DocLayoutV2/V3 pre/post-processing against the reference: the uint8 bicubic resize and pixel scaling against
torch (what torchvision's uint8 resize runs), the post-processing against the reference class's own methods
(tests/helpers/layout_reference.py), and the hub's config files."""

import json

import numpy as np
import pytest
from PIL import Image

from ms_ocr.layout.postprocess import postprocess
from ms_ocr.layout.processor import LayoutPreprocessConfig, preprocess
from ms_ocr.processing.resample import resize_bicubic_uint8
from bench.layout import reference_pixels
from tests.helpers.layout_reference import reference_postprocessor


@pytest.mark.parametrize("size", [(1024, 768), (600, 900), (1754, 1240), (333, 1000), (40, 2000), (5, 3), (800, 800)])
def test_uint8_bicubic_resize_is_torchs(size):
    import torch
    import torch.nn.functional as F
    img = np.random.default_rng(size[0]).integers(0, 256, size + (3,), dtype=np.uint8)
    want = F.interpolate(torch.from_numpy(img).permute(2, 0, 1)[None], size=(800, 800), mode="bicubic",
                         align_corners=False, antialias=False)[0].permute(1, 2, 0).numpy()
    got = resize_bicubic_uint8(img, 800, 800)
    assert got.dtype == np.uint8 and got.shape == (800, 800, 3)
    assert np.array_equal(got, want)


def test_pixel_values_bit_identical():
    rng = np.random.default_rng(1)
    page = Image.fromarray(rng.integers(0, 256, (700, 520, 3), dtype=np.uint8))
    got = preprocess(page, LayoutPreprocessConfig())
    want = reference_pixels(page, 800, 800)
    assert got.shape == want.shape == (1, 3, 800, 800) and got.dtype == np.float32
    assert np.array_equal(got, want)


def _outputs(seed, b=2, q=30, c=6):
    rng = np.random.default_rng(seed)
    logits = rng.normal(-0.5, 2.0, (b, q, c)).astype(np.float32)
    logits[0, 3, 1] = logits[0, 3, 4] = 4.0 + 0.01 * np.arange(1)[0]  # one query scoring with two labels
    logits[0, 3, 4] = 3.5
    cxcy = rng.uniform(0.1, 0.9, (b, q, 2))
    wh = rng.uniform(0.02, 0.3, (b, q, 2))
    boxes = np.concatenate([cxcy, wh], -1).astype(np.float32)
    order_logits = rng.normal(0, 3, (b, q, q)).astype(np.float32)
    order_logits[:, np.tril_indices(q)[0], np.tril_indices(q)[1]] = -1e4  # as the GlobalPointer masks it
    return logits, boxes, order_logits


@pytest.mark.parametrize("threshold", [0.5, 0.3])
def test_postprocess_matches_reference(threshold):
    import torch
    from types import SimpleNamespace
    logits, boxes, order_logits = _outputs(5)
    sizes = [(1024, 768), (600, 900)]
    ref = reference_postprocessor()
    out = SimpleNamespace(logits=torch.tensor(logits), pred_boxes=torch.tensor(boxes),
                          order_logits=torch.tensor(order_logits))
    want = ref.post_process_object_detection(out, threshold=threshold, target_sizes=sizes)
    got = postprocess(logits, boxes, order_logits, sizes, threshold)
    for g, w in zip(got, want):
        assert len(g["scores"]) == len(w["scores"]) > 3
        # the reference sorts with an unstable sort: a query kept with two labels may come out either way round
        key_g = np.lexsort((g["labels"], g["order_seq"]))
        key_w = np.lexsort((w["labels"].numpy(), w["order_seq"].numpy()))
        assert g["order_seq"][key_g].tolist() == w["order_seq"].numpy()[key_w].tolist()
        assert g["labels"][key_g].tolist() == w["labels"].numpy()[key_w].tolist()
        np.testing.assert_allclose(g["scores"][key_g], w["scores"].numpy()[key_w], rtol=1e-6)
        np.testing.assert_allclose(g["boxes"][key_g], w["boxes"].numpy()[key_w], rtol=1e-6, atol=1e-4)
    assert (got[0]["order_seq"] == got[0]["order_seq"][got[0]["labels"] == 1][0]).sum() >= 1


def test_per_label_threshold():
    """One threshold per label keeps exactly the pairs whose score reaches their label's threshold."""
    logits, boxes, order_logits = _outputs(6, b=1)
    cut = np.array([0.3, 0.9, 0.5, 0.2, 0.6, 0.99], np.float32)
    got = postprocess(logits, boxes, order_logits, None, cut)[0]
    scores = 1 / (1 + np.exp(-logits[0]))
    top = np.argsort(-scores.reshape(-1), kind="stable")[:30]
    q, c = top // 6, top % 6
    keep = scores[q, c] >= cut[c]
    assert sorted(zip(q[keep] * 0 + c[keep], scores[q, c][keep].round(6))) == \
        sorted(zip(got["labels"], got["scores"].round(6)))
    assert np.all(np.diff(got["order_seq"]) >= 0)


HUB_PREPROCESSOR = {"do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": [0, 0, 0],
                    "image_processor_type": "PPDocLayoutV2ImageProcessor", "image_std": [1, 1, 1], "resample": 3,
                    "rescale_factor": 0.00392156862745098, "size": {"height": 800, "width": 800}}


def test_hub_preprocessor_config(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(HUB_PREPROCESSOR))
    pcfg = LayoutPreprocessConfig.from_dir(str(tmp_path))
    assert (pcfg.height, pcfg.width, pcfg.rescale_factor, pcfg.image_std) == (800, 800, 1 / 255, (1.0, 1.0, 1.0))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(dict(HUB_PREPROCESSOR, size={"shortest_edge": 800})))
    with pytest.raises(ValueError, match="height and width"):
        LayoutPreprocessConfig.from_dir(str(tmp_path))


@pytest.mark.parametrize("size", [(1024, 768), (600, 900), (333, 1000), (1754, 1240), (5, 3), (800, 800)])
def test_float_bicubic_resize_is_torchs(size):
    """V4's resize: torch's float bicubic (antialias off), bit for bit, before its rounding back to uint8."""
    import torch
    import torch.nn.functional as F
    from ms_ocr.processing.resample import resize_bicubic_float
    img = np.random.default_rng(size[0]).integers(0, 256, size + (3,), dtype=np.uint8)
    want = F.interpolate(torch.from_numpy(img).permute(2, 0, 1)[None].float(), size=(800, 800), mode="bicubic",
                         align_corners=False, antialias=False)[0].permute(1, 2, 0).numpy()
    got = resize_bicubic_float(img, 800, 800)
    assert got.dtype == np.float32 and got.shape == (800, 800, 3)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("size", [(800, 800), (700, 520)])
def test_v4_pixel_values_bit_identical(size):
    """V4's pixel values (float resize, round, clamp, x * 1/255) against the reference's torch calls."""
    from bench.layout import reference_pixels
    page = Image.fromarray(np.random.default_rng(1).integers(0, 256, size + (3,), dtype=np.uint8))
    got = preprocess(page, LayoutPreprocessConfig(pixel_path="float"))
    want = reference_pixels(page, 800, 800, "v4")
    assert got.shape == want.shape == (1, 3, 800, 800) and got.dtype == np.float32
    assert np.array_equal(got, want)
