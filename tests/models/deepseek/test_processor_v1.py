"""DeepSeek-OCR v1 processing against golden outputs of the official process/image_process.py: views
(global and tiles, uint8 before normalisation), tile grids and image token counts for every mode and five
aspect ratios; the normalisation; the official candidate order and tie-breaking."""

import json
import os

import numpy as np
import pytest
from PIL import Image

from ms_ocr.models.deepseek_ocr.processor import MODES, DeepseekOCRProcessor, candidate_grids, closest_grid, to_pixels
from tests.helpers.golden_v1 import ROOT

SOURCES = ["A_300x200", "B_1000x800", "C_1500x1200", "D_2000x500", "E_700x1400"]


class _Tok:
    def id_to_token(self, i):
        return "<image>"

    def encode(self, text, add_special_tokens=False):
        # the golden run's stand-in tokenizer: one id per UTF-8 byte, special tokens whole
        ids = []
        for i, part in enumerate(text.split("<|grounding|>")):
            ids += ([128820] if i else []) + [1000 + b for b in part.encode()]
        return ids


@pytest.fixture(scope="module")
def data():
    return dict(np.load(os.path.join(ROOT, "process.npz")))


def _u8(pixels):
    return np.rint((pixels * 0.5 + 0.5) * 255.0).astype(np.uint8)


# the golden run covers every mode on A, D and E, and gundam (the tiling mode) on all five
CASES = [(m, s) for m in MODES for s in SOURCES if m == "gundam" or s[0] in "ADE"]


@pytest.mark.parametrize("mode,source", CASES)
def test_views_grid_and_token_count_match_official(mode, source, data):
    key = f"{mode}.{source}"
    proc = DeepseekOCRProcessor(_Tok(), 128815, 0, mode)
    img = Image.fromarray(data[f"src.{source}.src_u8"])
    tiles, grid, glob = proc.views(img)
    np.testing.assert_array_equal(_u8(glob[0]).transpose(1, 2, 0), data[key + ".global_u8"])
    want_grid = tuple(int(v) for v in data[key + ".images_spatial_crop"].reshape(-1)[:2])
    assert (grid or (1, 1)) == want_grid
    if tiles is not None:
        np.testing.assert_array_equal(_u8(tiles).transpose(0, 2, 3, 1), data[key + ".tiles_u8"])
    out = proc([img], "<|grounding|>Convert the document to markdown.")
    assert proc.image_token_count(grid) == int(data[key + ".num_image_tokens"].reshape(-1)[0])
    mask = out["input_ids"] == 128815
    np.testing.assert_array_equal(mask, data[key + ".images_seq_mask"].reshape(-1).astype(bool))
    assert out["input_ids"][0] == 0


@pytest.mark.parametrize("prompt", ["Free OCR.", "<|grounding|>Convert the document to markdown."])
def test_prompt_that_places_the_image_is_used_as_given(prompt):
    """The documented "<image>\\n..." prompts give the same ids as the bare task prompt (the processor puts
    "<image>\\n" first only when the prompt has no placeholder); a placeholder per image is required."""
    proc = DeepseekOCRProcessor(_Tok(), 128815, 0, "base")
    img = Image.new("RGB", (300, 140), (200, 30, 10))
    plain = proc([img], prompt)["input_ids"]
    assert plain[0] == 0 and int((plain == 128815).sum()) == proc.image_token_count(None)
    np.testing.assert_array_equal(proc([img], "<image>\n" + prompt)["input_ids"], plain)
    with pytest.raises(ValueError, match="2 <image> placeholder"):
        proc([img], "<image>\n<image>\n" + prompt)


def test_normalisation_is_the_official_lut():
    lut = np.load(os.path.join(ROOT, "process_norm_lut.npz"))
    u8 = np.broadcast_to(lut["u8"].astype(np.uint8).reshape(1, -1, 1), (1, 256, 3))
    got = to_pixels(Image.fromarray(np.ascontiguousarray(u8)))[0, 0]
    np.testing.assert_array_equal(got, lut["normalized"].astype(np.float32))


def test_candidate_order_and_ties():
    with open(os.path.join(ROOT, "process_order.json")) as f:
        order = json.load(f)
    assert [list(g) for g in candidate_grids(2, 6)] == order["max6"]
    assert [list(g) for g in candidate_grids(2, 9)] == order["max9"]
    assert closest_grid(1000, 800, 640) == (2, 2)  # (2,2) and (3,2) tie; area too small for the later one
    assert closest_grid(1500, 1200, 640) == (3, 2)
    assert closest_grid(1920, 1080, 640) == (2, 1)
