"""HunyuanOCR config layouts: the hub's flat v1.0 file and transformers' nested one."""

import pytest

from ms_ocr.config_utils import CheckpointError
from ms_ocr.models.hunyuan_vl.config import HunyuanOCRConfig
from tests.helpers.tiny_hunyuan import hub_config_json


def test_hub_flat_layout_reads_aliases_and_xdrope():
    raw = hub_config_json("bfloat16")
    cfg = HunyuanOCRConfig.from_dict(raw)
    assert cfg.flat_layout
    assert cfg.text.pad_token_id == raw["pad_id"]  # legacy pad_id wins over pad_token_id -1, as in transformers
    assert cfg.text.xdrope_section == [2, 2, 2, 2] and cfg.text.rope_alpha == 1000.0
    assert cfg.im_start_id == raw["image_start_token_id"] and cfg.im_newline_id == raw["image_newline_token_id"]
    assert cfg.text.tie_word_embeddings


def test_real_config_rope_base():
    raw = hub_config_json("bfloat16")
    raw.update(attention_head_dim=128, head_dim=128, hidden_size=1024, num_attention_heads=16)
    raw["rope_scaling"]["xdrope_section"] = [16, 16, 16, 16]
    cfg = HunyuanOCRConfig.from_dict(raw)
    assert cfg.text.rope_base == pytest.approx(10000.0 * 1000.0 ** (128 / 126))
    assert cfg.text.rope_base == pytest.approx(1.116e7, rel=1e-3)


def test_nested_layout_and_rope_parameters():
    raw = {"model_type": "hunyuan_vl", "text_config": {"vocab_size": 100, "hidden_size": 64, "num_attention_heads": 4,
           "num_hidden_layers": 1, "intermediate_size": 8, "rope_parameters": {"rope_type": "dynamic", "factor": 1.0,
           "rope_theta": 10000.0, "alpha": 1000.0, "mrope_section": [4, 2, 1, 1]}, "tie_word_embeddings": False},
           "vision_config": {}, "tie_word_embeddings": False}
    cfg = HunyuanOCRConfig.from_dict(raw)
    assert not cfg.flat_layout and not cfg.text.tie_word_embeddings
    assert cfg.text.head_dim == 16 and cfg.text.num_key_value_heads == 4
    assert cfg.text.xdrope_section == [4, 2, 1, 1]


def test_bad_configs_are_checkpoint_errors():
    raw = hub_config_json("float32")
    raw["rope_scaling"]["xdrope_section"] = [2, 2, 2]
    with pytest.raises(CheckpointError, match="xdrope_section"):
        HunyuanOCRConfig.from_dict(raw)
    with pytest.raises(CheckpointError, match="not a hunyuan-ocr checkpoint"):
        HunyuanOCRConfig.from_dict({"model_type": "paddleocr_vl"})
