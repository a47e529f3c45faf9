"""SAM ViT-B encoder of DeepSeek-OCR (v1 downsample [512, 1024] form) against transformers'
DeepseekOcr2SamVisionEncoder on a tiny config, at the native size, a smaller (position table shrunk with
antialias, global rel-pos tables shrunk) and a larger input, with window padding in every case."""

import re

import numpy as np
import pytest
import torch
from mindspore import Tensor

from ms_ocr.convert.loader import load_weights
from ms_ocr.nn.sam import SamEncoder
from tests.helpers.native import bound
from tests.helpers.parity import randomize_, rel_err

CFG = dict(hidden_size=32, output_channels=16, num_hidden_layers=4, num_attention_heads=2, image_size=128,
           patch_size=16, window_size=3, global_attn_indexes=[1, 3], mlp_dim=64, downsample_channels=[24, 48])
# transformers' module names -> the hub's sam_model names
TO_HUB = [(r"^layers\.(\d+)\.layer_norm1\.", r"blocks.\1.norm1."), (r"^layers\.(\d+)\.layer_norm2\.", r"blocks.\1.norm2."),
          (r"^layers\.", "blocks."), (r"^patch_embed\.projection\.", "patch_embed.proj."),
          (r"^neck\.conv1\.", "neck.0."), (r"^neck\.layer_norm1\.", "neck.1."), (r"^neck\.conv2\.", "neck.2."),
          (r"^neck\.layer_norm2\.", "neck.3."), (r"^proj\.conv1\.", "net_2."), (r"^proj\.conv2\.", "net_3.")]


def hub_name(name):
    for pattern, repl in TO_HUB:
        name, n = re.subn(pattern, repl, name)
        if n:
            break
    return name


@pytest.fixture(scope="module")
def pair(graph_mode):
    from transformers.models.deepseek_ocr2.configuration_deepseek_ocr2 import DeepseekOcr2SamVisionConfig
    from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import DeepseekOcr2SamVisionEncoder

    config = DeepseekOcr2SamVisionConfig(**CFG)
    config._attn_implementation = "eager"
    ref = randomize_(DeepseekOcr2SamVisionEncoder(config).eval(), 5)  # rel-pos and position tables random too
    ours = bound(SamEncoder(dim=32, depth=4, heads=2, mlp_dim=64, patch=16, image_size=128, window=3,
                            global_layers=(1, 3), out_channels=16, downsample=(24, 48)))
    tensors = [(hub_name(n), p.detach().numpy(), "F32") for n, p in ref.state_dict().items()]
    load_weights(ours, tensors, lambda n: n, source="tiny sam")
    return ref, ours


@pytest.mark.parametrize("size", [128, 96, 160, 112])  # grids 8 (native), 6, 10, 7: all pad windows of 3
def test_sam_matches_reference(size, pair):
    ref, ours = pair
    pixels = np.random.default_rng(size).standard_normal((1, 3, size, size)).astype(np.float32)
    with torch.no_grad():
        want = ref(torch.tensor(pixels)).last_hidden_state.numpy()  # NCHW
    got = ours(Tensor(pixels), *[Tensor(a) for a in ours.tables(size // 16).arrays()]).asnumpy()
    got = got.transpose(0, 3, 1, 2)
    assert got.shape == want.shape == (1, 48, -(-size // 64), -(-size // 64))
    assert rel_err(got, want) < 1e-4


@pytest.mark.parametrize("case", ["tiny_global", "tiles2", "base_global", "large_global"])
def test_sam_matches_official_v1_golden(case, graph_mode):
    """Numbers from a run of deepseek-ai/DeepSeek-OCR's own deepencoder (tiny config, see tests/data/README.md):
    inputs 128/160/256/320 px against a 256-px table, i.e. the Tiny / Gundam-tile / Base / Large cases."""
    from tests.helpers.golden_v1 import golden, golden_sam, pixels
    data = golden()
    sam = golden_sam()
    got = sam(Tensor(pixels(data["in." + case])),
              *[Tensor(a) for a in sam.tables(data["in." + case].shape[-1] // 16).arrays()]).asnumpy()
    assert rel_err(got.transpose(0, 3, 1, 2), data["sam." + case]) < 1e-4


@pytest.mark.parametrize("chunk", [1024, 5])  # 5: several global-attention row chunks, the last one short
def test_layerwise_sam_equals_one_graph_and_reference(chunk, pair):
    from ms_ocr.nn.sam import SamLayerwise
    ref, ours = pair
    pixels = np.random.default_rng(11).standard_normal((2, 3, 112, 112)).astype(np.float32)  # batch of 2, grid 7
    tables = [Tensor(a) for a in ours.tables(7).arrays()]
    runner = SamLayerwise(ours, chunk=chunk)
    got = runner(lambda step, *args: step(*args), Tensor(pixels), *tables).asnumpy()
    whole = ours(Tensor(pixels), *tables).asnumpy()
    with torch.no_grad():
        want = ref(torch.tensor(pixels)).last_hidden_state.numpy().transpose(0, 2, 3, 1)
    assert rel_err(got, whole) < 1e-5
    assert rel_err(got, want) < 1e-4
