"""The tiny-checkpoint fixture: every variant loads in transformers with the weights, ids and files intended."""

import json
import os

import numpy as np
import pytest

from ms_ocr.config_utils import load_config_json
from ms_ocr.models.paddleocr_vl.config import PaddleOCRVLConfig
from ms_ocr.processing.tokenizer import Tokenizer
from tests.helpers.tiny_paddle import SPECIAL_IDS, tiny_model

VARIANTS = [("transformers", "json", "float32", None), ("hub", "sentencepiece", "float32", None),
            ("hub", "json", "bfloat16", "100KB"), ("transformers", "sentencepiece", "bfloat16", "100KB")]


def _ids(variant):
    return "-".join(str(v) for v in variant if v)


@pytest.fixture(scope="module")
def built(tiny_checkpoint):
    return {v: tiny_checkpoint(v[0], v[1], v[2], v[3]) for v in VARIANTS}


@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_transformers_loads_variant(built, variant):
    import torch
    from transformers import PaddleOCRVLForConditionalGeneration

    layout, kind, dtype, shard = variant
    folder = built[variant]
    model, info = PaddleOCRVLForConditionalGeneration.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert model.dtype == getattr(torch, dtype)
    expected = tiny_model(seed=0).to(getattr(torch, dtype)).state_dict()
    loaded = model.state_dict()
    for name in ("model.language_model.embed_tokens.weight", "model.projector.linear_2.weight",
                 "model.visual.vision_model.embeddings.position_embedding.weight",
                 "model.language_model.layers.1.mlp.down_proj.weight"):
        assert torch.equal(loaded[name], expected[name]), name
    tied = model.lm_head.weight.data_ptr() == model.model.language_model.embed_tokens.weight.data_ptr()
    assert tied == (layout == "hub")  # transformers ties the hub's flat layout whatever its flag says
    files = sorted(os.listdir(folder))
    assert ("model.safetensors.index.json" in files) == (shard is not None)
    assert sum(f.endswith(".safetensors") for f in files) == (1 if shard is None else 8)
    assert ("tokenizer.json" in files) == (kind == "json") and ("tokenizer.model" in files) == (kind == "sentencepiece")
    assert ("chat_template.jinja" in files) == (layout == "transformers")
    with open(os.path.join(folder, "generation_config.json")) as f:
        assert json.load(f)["eos_token_id"] == 2


@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_token_ids_agree_with_config(built, variant):
    folder = built[variant]
    cfg = PaddleOCRVLConfig.from_dict(load_config_json(folder))
    tokenizer = Tokenizer.from_dir(folder)
    assert (cfg.image_token_id, cfg.vision_start_token_id, cfg.vision_end_token_id) == (386, 387, 388)
    for name, token in [("image_token_id", "<|IMAGE_PLACEHOLDER|>"), ("vision_start_token_id", "<|IMAGE_START|>"),
                        ("vision_end_token_id", "<|IMAGE_END|>"), ("video_token_id", "<|VIDEO_PLACEHOLDER|>")]:
        assert tokenizer.token_to_id(token) == SPECIAL_IDS[name]
    assert tokenizer.eos_token_id == cfg.text.eos_token_id == 2
    assert len(tokenizer) <= cfg.text.vocab_size == 400
    assert cfg.text.mrope_section == [2, 3, 3] and cfg.text.head_dim == 16


def test_hub_layout_files(built):
    from safetensors import safe_open

    folder = built["hub", "sentencepiece", "float32", None]
    raw = load_config_json(folder)
    assert "text_config" not in raw and raw["rope_scaling"]["mrope_section"] == [2, 3, 3]
    assert raw["vision_config"]["model_type"] == "paddleocr_vl" and raw["tie_word_embeddings"] is False
    with safe_open(os.path.join(folder, "model.safetensors"), "np") as f:
        keys = set(f.keys())
        assert f.get_tensor("visual.vision_model.embeddings.packing_position_embedding.weight").shape == (64, 64)
        assert f.get_tensor("visual.vision_model.head.attention.in_proj_weight").shape == (192, 64)
        np.testing.assert_array_equal(f.get_tensor("lm_head.weight"), f.get_tensor("model.embed_tokens.weight"))
    assert {"mlp_AR.linear_1.weight", "visual.vision_model.head.probe", "model.norm.weight"} <= keys
    with open(os.path.join(folder, "preprocessor_config.json")) as f:
        assert json.load(f)["max_pixels"] == 28 * 28 * 64


def test_logits_are_decisive(built):
    """Random weights with a large std give O(1..10) logits, so greedy tokens are stable across backends."""
    import torch
    from transformers import PaddleOCRVLForConditionalGeneration

    model = PaddleOCRVLForConditionalGeneration.from_pretrained(built["transformers", "json", "float32", None])
    ids = torch.tensor([[384, 335, 298, 263, 319, 289, 332, 314, 312, 319, 13]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    top2 = logits.topk(2, -1).values
    assert 1.0 < float(logits.std()) < 5.0 and float(logits.abs().max()) < 20.0
    assert float((top2[:, 0] - top2[:, 1]).median()) > 0.1


def test_auto_processor_needs_image_token(built):
    """transformers 5's PaddleOCRVLProcessor reads tokenizer.image_token: the transformers layout has it, the
    hub's original tokenizer_config does not (explicit classes plus an attribute are used for it instead)."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(built["transformers", "json", "float32", None])
    assert type(processor.image_processor).__name__ == "PaddleOCRVLImageProcessorPil"
    assert processor.image_token_id == 386
    with pytest.raises(AttributeError, match="image_token"):
        AutoProcessor.from_pretrained(built["hub", "sentencepiece", "float32", None])
