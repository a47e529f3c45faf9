"""HunyuanOCR rename table and the converter CLI on the hub layout."""

import json

import numpy as np
import pytest

from ms_ocr.config_utils import load_config_json
from ms_ocr.convert.safetensors_io import iter_checkpoint
from ms_ocr.models.hunyuan_vl import SPEC
from ms_ocr.models.hunyuan_vl.config import HunyuanOCRConfig
from tests.cli_util import run_module

IN_MEMORY = {  # transformers' module names -> the hub's
    "model.vision_tower.patch_merger.proj_conv.weight": "vit.perceive.proj.0.weight",
    "model.vision_tower.patch_merger.proj_out.bias": "vit.perceive.proj.2.bias",
    "model.vision_tower.patch_merger.image_newline": "vit.perceive.image_newline",
    "model.vision_tower.layers.3.layer_norm1.weight": "vit.layers.3.input_layernorm.weight",
    "model.vision_tower.layers.3.layer_norm2.bias": "vit.layers.3.post_attention_layernorm.bias",
    "model.vision_tower.layers.0.mlp.fc1.weight": "vit.layers.0.mlp.dense_h_to_4h.weight",
    "model.vision_tower.layers.0.mlp.fc2.bias": "vit.layers.0.mlp.dense_4h_to_h.bias",
    "model.vision_tower.embeddings.position_embedding.weight": "vit.embeddings.position_embedding.weight",
    "model.language_model.layers.1.self_attn.query_layernorm.weight": "model.layers.1.self_attn.query_layernorm.weight",
    "model.language_model.embed_tokens.weight": "model.embed_tokens.weight",
}


@pytest.fixture(scope="module")
def hub_cfg(hunyuan_checkpoint):
    return HunyuanOCRConfig.from_dict(load_config_json(hunyuan_checkpoint("hub", "bfloat16", "40KB")))


def test_rename_table_maps_in_memory_names_and_keeps_hub_names(hub_cfg):
    table = SPEC.name_table(hub_cfg)
    for src, want in IN_MEMORY.items():
        assert table(src) == want
        assert table(want) == want  # idempotent on the hub's own names
    assert table("lm_head.weight") is None  # tied: a stored copy is dropped


def test_hub_names_cover_the_model_exactly(hub_cfg, hunyuan_checkpoint):
    folder = hunyuan_checkpoint("hub", "bfloat16", "40KB")
    table = SPEC.name_table(hub_cfg)
    ours = {p.name for p in SPEC.build(hub_cfg).get_parameters() if "_cache" not in p.name}
    theirs = {table(n) for n, _, _ in iter_checkpoint(folder)}
    assert ours == theirs


def test_convert_cli_keeps_bf16_and_is_idempotent(hunyuan_checkpoint, tmp_path):
    src = hunyuan_checkpoint("hub", "bfloat16", "40KB")
    out1, out2 = tmp_path / "a", tmp_path / "b"
    for s, d in ((src, out1), (out1, out2)):
        proc = run_module("ms_ocr.convert", "--model", "hunyuan-ocr", "--src", str(s), "--dst", str(d))
        assert proc.returncode == 0, proc.stderr
    first = {n: (a, t) for n, a, t in iter_checkpoint(str(out1))}
    second = {n: (a, t) for n, a, t in iter_checkpoint(str(out2))}
    original = {n: (a, t) for n, a, t in iter_checkpoint(src)}
    assert first.keys() == second.keys() == original.keys()
    for name, (arr, tag) in original.items():
        assert tag == first[name][1] == "BF16"
        np.testing.assert_array_equal(arr, first[name][0])
        np.testing.assert_array_equal(arr, second[name][0])
    assert json.loads((out1 / "ms_ocr_convert.json").read_text())["model"] == "hunyuan_vl"
    assert (out1 / "tokenizer_config.json").is_file() and (out1 / "preprocessor_config.json").is_file()
