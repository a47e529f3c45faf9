"""HunyuanOCR processor parity with transformers' HunYuanVLProcessor + HunYuanVLImageProcessorPil."""

import numpy as np
import pytest
from PIL import Image

from ms_ocr.config_utils import load_config_json
from ms_ocr.models.hunyuan_vl.spec import SPEC
from ms_ocr.models.hunyuan_vl.config import HunyuanOCRConfig
from ms_ocr.models.hunyuan_vl.processor import HunyuanOCRProcessor
from ms_ocr.processing.image import ImageError
from tests.helpers.tiny_hunyuan import reference_inputs, reference_processor

# (width, height) -> expected patch grid (gh, gw) with the fixture's 4..48 merged-token budget (factor 32)
SIZES = {"tall": ((60, 400), (24, 4)), "wide": ((500, 70), (4, 32)), "tiny": ((20, 13), (4, 6)),
         "over_max": ((400, 300), (12, 16)), "doc_3x4": ((150, 200), (12, 10)), "a4_150dpi": ((1240, 1754), (16, 10)),
         "square": ((64, 64), (4, 4)), "odd": ((97, 33), (4, 8))}


def _image(size, seed):
    w, h = size
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def setups(hunyuan_checkpoint):
    """{layout: (our processor, transformers processor, system prompt the layout is run with)}."""
    out = {}
    for layout in ("transformers", "hub"):
        folder = hunyuan_checkpoint(layout)
        cfg = HunyuanOCRConfig.from_dict(load_config_json(folder))
        ours = HunyuanOCRProcessor.from_pretrained(folder, cfg)
        out[layout] = (ours, reference_processor(hunyuan_checkpoint()), ours.system_prompt)
    return out


@pytest.fixture(scope="module")
def rope_model(hunyuan_checkpoint):
    from transformers import HunYuanVLForConditionalGeneration
    return HunYuanVLForConditionalGeneration.from_pretrained(hunyuan_checkpoint()).model


def _compare(ours, ref, system, images, prompt, rope_model):
    import torch

    got = ours(images, prompt)
    want = {k: v.numpy() for k, v in reference_inputs(ref, images, prompt, system).items()}
    np.testing.assert_array_equal(got["input_ids"], want["input_ids"][0])
    np.testing.assert_array_equal(got["mm_token_type_ids"], want["mm_token_type_ids"][0])
    if images:
        np.testing.assert_array_equal(got["image_grid_thw"], want["image_grid_thw"])
        np.testing.assert_array_equal(got["pixel_values"], want["pixel_values"])  # bit-identical
    pos, delta = rope_model.get_rope_index(torch.tensor(want["input_ids"]),
                                           mm_token_type_ids=torch.tensor(want["mm_token_type_ids"]),
                                           image_grid_thw=torch.tensor(want["image_grid_thw"]) if images else None)
    np.testing.assert_array_equal(got["position_ids"], pos[:, 0].numpy())
    assert got["rope_delta"] == int(delta[0, 0])
    return got


@pytest.mark.parametrize("name", list(SIZES))
def test_processor_matches_reference(name, setups, rope_model):
    ours, ref, system = setups["transformers"]
    size, grid = SIZES[name]
    got = _compare(ours, ref, system, [_image(size, 1)], SPEC.tasks["spotting"], rope_model)
    assert tuple(got["image_grid_thw"][0, 1:]) == grid
    h, w = grid[0] // 2, grid[1] // 2
    assert int(got["mm_token_type_ids"].sum()) == h * (w + 1) + 2


def test_hub_layout_prompt_has_the_empty_system_turn_and_matches_reference(setups, rope_model):
    ours, ref, system = setups["hub"]
    assert system == ""
    got = _compare(ours, ref, system, [_image((150, 200), 2)], SPEC.tasks["parse"], rope_model)
    assert got["text"].startswith("<｜hy_begin▁of▁sentence｜><｜hy_place▁holder▁no▁3｜><｜hy_place▁holder▁no▁100｜>")
    assert got["text"].endswith("<｜hy_User｜>")


def test_two_images_in_one_prompt(setups, rope_model):
    ours, ref, system = setups["transformers"]
    got = _compare(ours, ref, system, [_image((60, 400), 3), _image((500, 70), 4)], "Read both.", rope_model)
    assert got["position_ids"].shape[0] == 4
    assert set(np.unique(got["position_ids"][3])) >= {0, 1}  # image index axis


def test_text_only_prompt(setups, rope_model):
    ours, ref, system = setups["transformers"]
    _compare(ours, ref, system, [], "hello", rope_model)


def test_resample_in_file_is_ignored_like_the_reference(setups):
    ours, _, _ = setups["hub"]
    assert ours.settings.resample == 1  # the hub file says LANCZOS ...
    assert ours.resample() == Image.Resampling.BICUBIC  # ... the reference always uses bicubic


def test_extreme_aspect_ratio_is_an_image_error(setups):
    ours, _, _ = setups["transformers"]
    with pytest.raises(ImageError, match="aspect ratio"):
        ours([_image((3000, 10), 5)], "x")
