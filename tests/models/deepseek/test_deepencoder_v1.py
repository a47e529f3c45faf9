"""DeepSeek-OCR v1 DeepEncoder (SAM -> CLIP -> concat -> projector -> newline/view_seperator assembly) against
golden numbers from the official code (tiny config): Gundam (a 1x2 tile grid + global), Base, Large, Tiny."""

import numpy as np
import pytest
from mindspore import Tensor

from ms_ocr.convert.loader import load_weights
from ms_ocr.models.deepseek_ocr.vision import DeepEncoderV1, assembly_index
from ms_ocr.processing.resample import bicubic_aa_matrix
from tests.helpers.golden_v1 import clip_kwargs, golden, pixels, sam_kwargs, tiny_config, weights
from tests.helpers.native import bound
from tests.helpers.parity import rel_err


@pytest.fixture(scope="module")
def encoder(graph_mode):
    enc = bound(DeepEncoderV1(sam_kwargs(), clip_kwargs(), tiny_config()["n_embed"]))
    drop = ("vision_model.embeddings.patch_embedding.",)
    load_weights(enc, [t for t in weights("") if not t[0].startswith(drop)], lambda n: n, source="golden")
    return enc


def _view(enc, u8):
    size = u8.shape[-1]
    g = -(-size // 64)
    args = (pixels(u8), *enc.sam_model.tables(size // 16).arrays(), bicubic_aa_matrix(enc.vision_model.grid, g))
    return enc(*[Tensor(a) for a in args]).asnumpy()


CASES = {"gundam_w1h2": ("base_global", "tiles2"), "base_noTiles": ("base_global", None),
         "large_noTiles": ("large_global", None), "tiny_noTiles": ("tiny_global", None)}


@pytest.mark.parametrize("case", list(CASES))
def test_assembled_features_match_official(case, encoder):
    data = golden()
    glob_key, tiles_key = CASES[case]
    glob = _view(encoder, data["in." + glob_key])[0]
    parts, grid, tile_g = [], None, 0
    if tiles_key:
        tiles = _view(encoder, data["in." + tiles_key])
        grid, tile_g = tuple(int(v) for v in data["grid." + case]), tiles.shape[1]
        parts.append(tiles.reshape(-1, tiles.shape[-1]))
    parts += [glob.reshape(-1, glob.shape[-1]), encoder.image_newline.asnumpy()[None],
              encoder.view_seperator.asnumpy()[None]]
    index = assembly_index(grid, tile_g, glob.shape[0])
    got = np.concatenate(parts)[index]
    want = data["asm." + case]
    assert got.shape == want.shape
    assert rel_err(got, want) < 1e-4
