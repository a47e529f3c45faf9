"""PaddleOCR-VL processor parity with transformers' PaddleOCRVLProcessor + PaddleOCRVLImageProcessorPil."""

import json
import shutil

import numpy as np
import pytest
from PIL import Image

from ms_ocr.config_utils import CheckpointError, load_config_json
from ms_ocr.models.paddleocr_vl.config import PaddleOCRVLConfig
from tests.helpers.reference import reference_inputs, reference_processor
from ms_ocr.models.paddleocr_vl.spec import SPEC
from ms_ocr.models.paddleocr_vl.processor import (IMAGE_DEFAULTS, PaddleOCRVLProcessor,
                                                  read_image_settings, smart_resize)
from ms_ocr.processing.image import ImageError

LAYOUTS = {"transformers": ("transformers", "json"), "hub": ("hub", "sentencepiece")}
# (width, height) -> expected (grid_h, grid_w) with the fixture's 4..64 merged-token budget
SIZES = {"tall": ((60, 400), (28, 4)), "wide": ((500, 70), (4, 36)), "tiny": ((20, 13), (4, 6)),
         "over_max": ((400, 300), (12, 18)), "doc_3x4": ((150, 200), (14, 10)), "a4_150dpi": ((1240, 1754), (18, 12)),
         "square": ((64, 64), (4, 4)), "one_patch": ((28, 28), (4, 4)),
         "thin_strip": ((7, 1000), (190, 2))}  # the reference lets this one exceed max_pixels


def _image(size, seed):
    w, h = size
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def setups(tiny_checkpoint):
    """{layout: (folder, our processor, transformers processor)}."""
    out = {}
    for name, (layout, kind) in LAYOUTS.items():
        folder = tiny_checkpoint(layout, kind)
        cfg = PaddleOCRVLConfig.from_dict(load_config_json(folder))
        ref = reference_processor(folder, cfg)
        out[name] = (folder, PaddleOCRVLProcessor.from_pretrained(folder, cfg), ref)
    return out


@pytest.fixture(scope="module")
def rope_model(setups):
    from transformers import PaddleOCRVLForConditionalGeneration

    return PaddleOCRVLForConditionalGeneration.from_pretrained(setups["transformers"][0]).model


def _reference(ref, images, prompt):
    r = reference_inputs(ref, images, prompt)
    return {k: v.numpy() for k, v in r.items()}


def _reference_rope(model, r):
    import torch

    pos, delta = model.get_rope_index(torch.tensor(r["input_ids"]),
                                      mm_token_type_ids=torch.tensor(r["mm_token_type_ids"]),
                                      image_grid_thw=torch.tensor(r["image_grid_thw"]))
    return pos[:, 0].numpy(), int(delta[0, 0])


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", list(SIZES))
def test_single_image_matches_reference(setups, rope_model, layout, case):
    size, grid = SIZES[case]
    _, ours, ref = setups[layout]
    img = _image(size, seed=len(case))
    got, want = ours([img], SPEC.tasks["ocr"]), _reference(ref, [img], SPEC.tasks["ocr"])
    assert got["image_grid_thw"].tolist() == [[1, *grid]] == want["image_grid_thw"].tolist()
    assert got["pixel_values"].dtype == np.float32 and got["pixel_values"].shape == (grid[0] * grid[1], 3, 14, 14)
    np.testing.assert_array_equal(got["pixel_values"], want["pixel_values"])
    np.testing.assert_array_equal(got["input_ids"], want["input_ids"][0])
    np.testing.assert_array_equal(got["mm_token_type_ids"], want["mm_token_type_ids"][0])
    assert int(got["mm_token_type_ids"].sum()) == grid[0] * grid[1] // 4
    pos, delta = _reference_rope(rope_model, want)
    np.testing.assert_array_equal(got["position_ids"], pos)
    assert got["rope_delta"] == delta
    assert got["input_ids"].dtype == got["position_ids"].dtype == got["image_grid_thw"].dtype == np.int64


def test_prompt_text_and_layout(setups):
    img = _image((64, 64), 0)
    hub = setups["hub"][1]([img], SPEC.tasks["table"])
    assert hub["text"] == ("<|begin_of_sentence|>User: <|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>"
                           "Table Recognition:\nAssistant: ")
    ids = hub["input_ids"].tolist()
    assert ids[0] == 384 and ids[ids.index(387):ids.index(388) + 1] == [387, 386, 386, 386, 386, 388]
    # a 2x2 merged grid: t stays at the start position, h/w walk the grid, text resumes max(2, 2) later
    start = ids.index(386)
    np.testing.assert_array_equal(hub["position_ids"][:, start:start + 5],
                                  [[start] * 4 + [start + 2], [start, start, start + 1, start + 1, start + 2],
                                   [start, start + 1, start, start + 1, start + 2]])
    assert hub["rope_delta"] == -2
    # the sentencepiece model gives each span between added tokens its dummy prefix ("▁User", "▁Table"); decoding
    # drops only the text's first space, as transformers' does
    want = setups["hub"][2].tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    assert setups["hub"][1].decode(hub["input_ids"]) == want == "User:  Table Recognition:\nAssistant: "


def test_two_images_match_reference(setups, rope_model):
    _, ours, ref = setups["hub"]
    images = [_image((60, 400), 1), _image((500, 70), 2)]
    got, want = ours(images, SPEC.tasks["formula"]), _reference(ref, images, SPEC.tasks["formula"])
    assert got["image_grid_thw"].tolist() == [[1, 28, 4], [1, 4, 36]] == want["image_grid_thw"].tolist()
    np.testing.assert_array_equal(got["pixel_values"], want["pixel_values"])
    np.testing.assert_array_equal(got["input_ids"], want["input_ids"][0])
    pos, delta = _reference_rope(rope_model, want)
    np.testing.assert_array_equal(got["position_ids"], pos)
    assert got["rope_delta"] == delta == (28 // 2 - 28) + (36 // 2 - 36)  # sum of (advance - tokens) per image


def test_adjacent_images_keep_separate_grids(setups):
    # With `image_token` defined the template emits bare placeholders, so two images touch; transformers'
    # get_rope_index merges such runs (and fails), we give each image its own grid.
    _, ours, ref = setups["transformers"]
    images = [_image((64, 64), 3), _image((28, 28), 4)]
    got, want = ours(images, "OCR:"), _reference(ref, images, "OCR:")
    np.testing.assert_array_equal(got["input_ids"], want["input_ids"][0])
    ids = got["input_ids"].tolist()
    s = ids.index(386)
    assert ids[s:s + 8] == [386] * 8 and ids[s + 8] != 386
    np.testing.assert_array_equal(got["position_ids"][:, s:s + 9], [
        [s, s, s, s, s + 2, s + 2, s + 2, s + 2, s + 4],
        [s, s, s + 1, s + 1, s + 2, s + 2, s + 3, s + 3, s + 4],
        [s, s + 1, s, s + 1, s + 2, s + 3, s + 2, s + 3, s + 4]])


def test_rgba_input_is_composited(setups):
    _, ours, ref = setups["hub"]
    rgba = Image.fromarray(np.random.default_rng(5).integers(0, 256, (50, 70, 4), dtype=np.uint8), "RGBA")
    np.testing.assert_array_equal(ours([rgba], "OCR:")["pixel_values"], _reference(ref, [rgba], "OCR:")["pixel_values"])


def test_smart_resize_matches_reference_and_rejects_extreme_aspect():
    from transformers.models.paddleocr_vl.image_processing_pil_paddleocr_vl import smart_resize as ref_resize

    for h in (1, 13, 27, 28, 29, 55, 56, 100, 333, 1000, 2048, 4096):
        for w in (1, 14, 28, 41, 99, 500, 1754, 3000):
            for limits in ((3136, 50176), (384 * 384, 1536 * 1536)):
                try:
                    want = ref_resize(h, w, 28, *limits)
                except ValueError:
                    with pytest.raises(ImageError):
                        smart_resize(h, w, 28, *limits)
                    continue
                assert smart_resize(h, w, 28, *limits) == want, (h, w, limits)
    with pytest.raises(ImageError, match="aspect ratio 300.0 exceeds 200") as info:
        smart_resize(10, 3000)
    assert "\n" not in str(info.value)
    # exactly 200:1 is allowed; the short side cannot drop below one factor, so this exceeds max_pixels
    assert smart_resize(28, 5600, 28, 3136, 50176) == (28, 3164)


def test_zero_size_image_is_an_image_error(setups):
    with pytest.raises(ImageError, match="zero size"):
        setups["hub"][1]([Image.new("RGB", (0, 5))], "OCR:")


def test_image_settings_sources_and_defaults(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"min_pixels": 100, "max_pixels": 900,
                                                                   "size": {"shortest_edge": 1, "longest_edge": 2}}))
    s = read_image_settings(str(tmp_path))
    assert (s.min_pixels, s.max_pixels) == (100, 900)  # legacy keys win over size, as in the reference __init__
    (tmp_path / "preprocessor_config.json").write_text("{}")
    s = read_image_settings(str(tmp_path))
    assert (s.min_pixels, s.max_pixels, s.patch_size, s.merge_size, s.temporal_patch_size) == (
        147456, 2359296, 14, 2, 1)
    assert s.image_mean == IMAGE_DEFAULTS["image_mean"] and s.rescale_factor == 1 / 255 and s.resample == 3
    (tmp_path / "processor_config.json").write_text(json.dumps(
        {"image_processor": {"size": {"shortest_edge": 3136, "longest_edge": 6272}, "image_mean": [0.1] * 3}}))
    s = read_image_settings(str(tmp_path))
    assert (s.min_pixels, s.max_pixels, s.image_mean) == (3136, 6272, [0.1] * 3)
    (tmp_path / "processor_config.json").write_text(json.dumps({"image_processor": {"size": {"longest_edge": 9}}}))
    with pytest.raises(CheckpointError, match="shortest_edge and longest_edge"):
        read_image_settings(str(tmp_path))


def test_checkpoint_mismatches_are_reported(setups, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(setups["hub"][0], folder)
    cfg = PaddleOCRVLConfig.from_dict(load_config_json(str(folder)))
    config = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps({**config, "merge_size": 4}))
    with pytest.raises(CheckpointError, match="merge_size 14/4 differ"):
        PaddleOCRVLProcessor.from_pretrained(str(folder), cfg)
    (folder / "preprocessor_config.json").unlink()
    with pytest.raises(CheckpointError, match="no preprocessor_config.json"):
        PaddleOCRVLProcessor.from_pretrained(str(folder), cfg)
