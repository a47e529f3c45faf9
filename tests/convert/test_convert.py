"""Rename tables, the safetensors reader/writer, strict loading and the converter CLI."""

import json
import os

import numpy as np
import pytest

from ms_ocr.config_utils import CheckpointError, load_config_json
from ms_ocr.convert.loader import round_to_bf16
from ms_ocr.convert.safetensors_io import checkpoint_dtypes, iter_checkpoint, iter_file, save_file
from ms_ocr.models.paddleocr_vl.config import PaddleOCRVLConfig
from ms_ocr.models.paddleocr_vl.convert import name_table
from tests.cli_util import run_module

# (checkpoint key, ms_ocr name or None = dropped), written by hand
PADDLE_PAIRS = [
    ("model.layers.3.self_attn.q_proj.weight", "model.layers.3.self_attn.q_proj.weight"),
    ("model.embed_tokens.weight", "model.embed_tokens.weight"),
    ("mlp_AR.linear_1.bias", "mlp_AR.linear_1.bias"),
    ("visual.vision_model.encoder.layers.26.mlp.fc2.weight", "visual.vision_model.encoder.layers.26.mlp.fc2.weight"),
    ("model.language_model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight"),
    ("model.language_model.norm.weight", "model.norm.weight"),
    ("model.visual.vision_model.post_layernorm.bias", "visual.vision_model.post_layernorm.bias"),
    ("model.projector.pre_norm.weight", "mlp_AR.pre_norm.weight"),
    ("visual.vision_model.embeddings.packing_position_embedding.weight", None),
    ("visual.vision_model.head.attention.in_proj_weight", None),
    ("visual.vision_model.head.probe", None),
]


def _cfg(tied):
    from tests.helpers.tiny_paddle import TEXT, VISION
    text = dict(TEXT, rope_parameters={"rope_theta": 5e5, "mrope_section": [2, 3, 3]}, tie_word_embeddings=tied)
    return PaddleOCRVLConfig.from_dict({"model_type": "paddleocr_vl", "text_config": text, "vision_config": VISION,
                                        "tie_word_embeddings": tied})


@pytest.mark.parametrize("src,want", PADDLE_PAIRS)
def test_paddle_rename_table(src, want):
    assert name_table(_cfg(True))(src) == want


def test_lm_head_dropped_only_when_tied():
    assert name_table(_cfg(True))("lm_head.weight") is None
    assert name_table(_cfg(False))("lm_head.weight") == "lm_head.weight"


def test_rename_table_is_idempotent():
    table = name_table(_cfg(True))
    for src, _ in PADDLE_PAIRS:
        once = table(src)
        assert once is None or table(once) == once


def test_bf16_round_trip_and_rounding(tmp_path):
    import torch
    vals = np.array([1.0, -2.5, 3.14159, 1e-3, 65504.0, 1.00390625, 1.01171875], np.float32)
    rounded = round_to_bf16(vals)
    # bf16 keeps 8 significant bits, ties to even (1.00390625 -> 1.0, 1.01171875 -> 1.015625)
    assert rounded.tolist() == [1.0, -2.5, 3.140625, 0.00099945068359375, 65536.0, 1.0, 1.015625]
    rand = np.random.default_rng(0).standard_normal(10000).astype(np.float32)
    assert np.array_equal(round_to_bf16(rand), torch.tensor(rand).bfloat16().float().numpy())
    path = str(tmp_path / "w.safetensors")
    save_file({"a": (rounded, "BF16"), "b": np.arange(6, dtype=np.int64)}, path)
    got = {n: (a, t) for n, a, t in iter_file(path)}
    assert got["a"][1] == "BF16" and got["a"][0].tolist() == rounded.tolist()
    assert got["b"][0].tolist() == list(range(6))
    from safetensors.torch import load_file
    ref = load_file(path)  # a standard file: the reference library reads it
    assert ref["a"].dtype == torch.bfloat16 and ref["a"].float().tolist() == rounded.tolist()


def test_sharded_checkpoint_reads_every_tensor(tiny_checkpoint):
    folder = tiny_checkpoint("hub", "json", "bfloat16", "100KB")
    assert os.path.isfile(os.path.join(folder, "model.safetensors.index.json"))
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        names = set(json.load(f)["weight_map"])
    assert {n for n, _, _ in iter_checkpoint(folder)} == names
    assert checkpoint_dtypes(folder) == {"BF16"}


def test_strict_load_lists_missing_and_unexpected(tiny_dir):
    from ms_ocr.convert.loader import load_weights
    from ms_ocr.models.paddleocr_vl import SPEC
    cfg = PaddleOCRVLConfig.from_dict(load_config_json(tiny_dir))
    net = SPEC.build(cfg)
    tensors = [(n, a, t) for n, a, t in iter_checkpoint(tiny_dir) if n != "model.norm.weight"]
    tensors.append(("model.extra.weight", np.zeros(3, np.float32), "F32"))
    with pytest.raises(CheckpointError) as e:
        load_weights(net, tensors, name_table(cfg), source="x")
    assert "missing 1 key(s): model.norm.weight" in str(e.value)
    assert "unexpected 1 key(s): model.extra.weight" in str(e.value)


def test_converter_cli_and_idempotency(tiny_checkpoint, tmp_path):
    src = tiny_checkpoint("hub", "sentencepiece", "bfloat16", "100KB")
    dst, again = tmp_path / "ms", tmp_path / "ms2"
    p = run_module("ms_ocr.convert", "--model", "paddleocr-vl", "--src", src, "--dst", str(dst))
    assert p.returncode == 0, p.stderr
    out = {n: (a, t) for n, a, t in iter_checkpoint(str(dst))}
    assert not any("packing_position" in n or ".head." in n or n == "lm_head.weight" for n in out)
    assert all(t == "BF16" for _, t in out.values())  # precision kept
    src_vals = {n: a for n, a, _ in iter_checkpoint(src)}
    assert all(np.array_equal(out[n][0], src_vals[n]) for n in out)
    for fn in ("config.json", "tokenizer.model", "tokenizer_config.json", "preprocessor_config.json"):
        assert os.path.isfile(dst / fn), fn
    p2 = run_module("ms_ocr.convert", "--model", "paddleocr-vl", "--src", str(dst), "--dst", str(again))
    assert p2.returncode == 0, p2.stderr
    assert (dst / "model.safetensors").read_bytes() == (again / "model.safetensors").read_bytes()


def test_converter_rejects_wrong_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "hunyuan_vl"}))
    p = run_module("ms_ocr.convert", "--model", "paddleocr-vl", "--src", str(tmp_path), "--dst", str(tmp_path / "o"))
    assert p.returncode != 0 and "hunyuan_vl" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def _stack_net():
    from mindspore import nn
    from ms_ocr.nn.layers import zeros_param

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = zeros_param((3, 4, 8))

    return Net()


@pytest.mark.parametrize("case", ["raw bf16", "one slice fp32", "kept fp32"])
def test_stacked_slices_load_exactly(case):
    """Per-expert slices of a stacked Parameter: raw bf16 bits of a Parameter kept in bf16 go straight into its
    pool tensor (no widening and rounding back); a slice that is not bf16 among them, or a Parameter not kept in
    bf16, goes through float32. Values are exact either way."""
    import mindspore as ms
    from ms_ocr.convert.loader import bf16_bits, load_weights
    from ms_ocr.convert.safetensors_io import widen_bf16
    rng = np.random.default_rng(0)
    values = [widen_bf16(bf16_bits(rng.standard_normal((4, 8)).astype(np.float32))) for _ in range(3)]
    tensors = [(f"e.{i}", bf16_bits(v), "BF16") for i, v in enumerate(values)]
    if case == "one slice fp32":
        values[2] = rng.standard_normal((4, 8)).astype(np.float32)  # not a bf16 value
        tensors[2] = ("e.2", values[2], "F32")
    net = _stack_net()
    keep = set() if case == "kept fp32" else {"w"}
    load_weights(net, iter(tensors), lambda name: ("w", int(name.split(".")[1])), keep_bf16=keep)
    want_dtype = ms.bfloat16 if case == "raw bf16" else ms.float32
    assert net.w.dtype == want_dtype
    np.testing.assert_array_equal(net.w.astype(ms.float32).asnumpy(), np.stack(values))
