"""Unlimited-OCR's files: its config in both layouts (read as transformers 5.25 reads them), which DeepEncoder-v1
model a config is, its processor's differences from DeepSeek-OCR's (32 tiles, its prompts), its rename table, and
its layout output."""

import copy

import numpy as np
import pytest

from ms_ocr.config_utils import CheckpointError
from ms_ocr.processing.deepseek import deepencoder_v1_model
from bench import tiny_unlimited as tu


def _saved():
    return tu.tiny_model().config.to_dict()


def test_both_layouts_read_the_same_model_as_transformers_does():
    from ms_ocr.models.unlimited_ocr.config import UnlimitedOCRConfig
    ref = tu.tiny_model().config.text_config
    hub, saved = UnlimitedOCRConfig.from_dict(tu.hub_config()), UnlimitedOCRConfig.from_dict(_saved())
    assert hub.sam == saved.sam and hub.clip == saved.clip and hub.image_token_id == saved.image_token_id
    assert vars(hub.text) == vars(saved.text)
    for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok",
                 "n_shared_experts", "routed_scaling_factor", "rms_norm_eps", "max_position_embeddings",
                 "bos_token_id", "eos_token_id", "mlp_layer_types", "sliding_window", "head_dim"):
        assert getattr(saved.text, name) == getattr(ref, name), name
    assert saved.text.rope_theta == ref.rope_parameters["rope_theta"] and not saved.text.tie_word_embeddings


def test_the_window_is_read_where_transformers_and_the_remote_code_read_it():
    from ms_ocr.models.unlimited_ocr.config import UnlimitedOCRConfig

    def window(raw):
        return UnlimitedOCRConfig.from_dict(raw).text.sliding_window

    hub = tu.hub_config(window=8)
    assert window(dict(hub, sliding_window=16)) == 16  # the top-level key first (transformers)
    no_top = {k: v for k, v in hub.items() if k != "sliding_window"}
    assert window(dict(no_top, sliding_window_size=12)) == 12
    assert window({k: v for k, v in no_top.items() if k != "sliding_window_size"}) == 8  # language_config's
    bare = {k: v for k, v in no_top.items() if k != "sliding_window_size"}
    bare["language_config"] = {k: v for k, v in bare["language_config"].items() if k != "sliding_window_size"}
    assert window(bare) == 128  # transformers' default
    saved = _saved()
    assert window(saved) == tu.WINDOW
    full = copy.deepcopy(saved)
    full["text_config"]["layer_types"] = ["full_attention"] * 3
    with pytest.raises(CheckpointError, match="only reference_sliding_attention"):
        UnlimitedOCRConfig.from_dict(full)


def test_which_deepencoder_v1_model_a_config_is():
    from tests.helpers.golden_v1 import v1_config_json
    v1 = v1_config_json()
    assert deepencoder_v1_model(v1) == "deepseek-ocr"
    assert deepencoder_v1_model({k: v for k, v in v1.items() if k != "architectures"}) == "deepseek-ocr"
    assert deepencoder_v1_model(tu.hub_config()) == "unlimited-ocr"
    assert deepencoder_v1_model(_saved()) == "unlimited-ocr"
    # a window with nothing naming the model, or with DeepSeek-OCR's architectures: either model
    for raw in (dict({k: v for k, v in v1.items() if k != "architectures"}, sliding_window=128),
                dict(v1, sliding_window=128), dict(v1, language_config=dict(v1["language_config"],
                                                                           sliding_window_size=128))):
        with pytest.raises(CheckpointError, match="cannot tell deepseek-ocr from unlimited-ocr"):
            deepencoder_v1_model(raw)
    with pytest.raises(CheckpointError, match="names both models"):
        deepencoder_v1_model(dict(tu.hub_config(), architectures=["DeepseekOCRForCausalLM"]))


def test_the_processor_takes_up_to_32_tiles_and_puts_image_right_before_the_prompt(tmp_path):
    from PIL import Image

    from ms_ocr import models
    from ms_ocr.models.deepseek_ocr.processor import DeepseekOCRProcessor
    folder = tu.make_checkpoint(str(tmp_path / "ckpt"))
    ours = models.get("unlimited-ocr").host_side(folder)["processor"]
    v1 = DeepseekOCRProcessor(ours.tokenizer, ours.image_token_id, ours.bos_id, "gundam", ours.scale)
    wide = Image.new("RGB", (2400, 150), (255, 255, 255))  # aspect 16: 16 tiles in a row (v1: 6)
    out = ours([wide], "document parsing.")
    assert out["views"][0][1] == (16, 1) and v1([wide], "x")["views"][0][1] == (6, 1)
    assert out["text"] == "<image>document parsing."
    tok = ours.tokenizer
    n = int((out["input_ids"] == tu.IMAGE_TOKEN_ID).sum())
    assert n == ours.image_token_count((16, 1)) == 4 * 5 + 1 + 3 * (16 * 3 + 1)
    assert list(out["input_ids"]) == [tu.BOS] + [tu.IMAGE_TOKEN_ID] * n + tok.encode("document parsing.",
                                                                                     add_special_tokens=False)
    two = ours([wide, wide], "Multi page parsing.")
    assert two["text"] == "<image><image>Multi page parsing."


def test_rename_table_hand_written_pairs():
    from ms_ocr.models.unlimited_ocr.config import UnlimitedOCRConfig
    from ms_ocr.models.unlimited_ocr.convert import name_table
    table = name_table(UnlimitedOCRConfig.from_dict(tu.hub_config()))
    pairs = {"model.sam_model.blocks.1.attn.qkv.weight": "vision.sam_model.blocks.1.attn.qkv.weight",
             "model.vision_model.transformer.layers.0.self_attn.qkv_proj.bias":
                 "vision.vision_model.transformer.layers.0.self_attn.qkv_proj.bias",
             "model.projector.layers.weight": "vision.projector.layers.weight",
             "model.view_seperator": "vision.view_seperator", "model.image_newline": "vision.image_newline",
             "model.layers.1.mlp.gate.weight": "model.layers.1.mlp.gate.weight",
             "model.layers.2.mlp.experts.5.up_proj.weight": ("model.layers.2.mlp.experts.up_proj", 5),
             "lm_head.weight": "lm_head.weight",
             "model.vision_model.embeddings.patch_embedding.weight": None}
    for hub, local in pairs.items():
        assert table(hub) == local, hub


def test_layout_output_is_parsed_into_boxes():
    from PIL import Image

    from ms_ocr.models.unlimited_ocr.host import postprocess
    text = ("<|det|>title [100, 50, 899, 120]<|/det|># Report\n<|det|>text [10, 750, 990, 990]<|/det|>Body text."
            "<PAGE>")
    out, extras = postprocess(text, "ocr", [Image.new("RGB", (1000, 2000))])
    assert out == "# Report\nBody text.<PAGE>"
    assert extras["blocks"] == [{"label": "title", "box": [100, 100, 899, 240], "text": "# Report"},
                                {"label": "text", "box": [10, 1501, 990, 1981], "text": "Body text."}]


def test_window_slots_hold_the_prompt_and_a_ring_of_w():
    from ms_ocr.runtime.window import HIDDEN, WindowSlots
    w = WindowSlots(4)
    assert w.held(10, 3) == 13 and w.held(10, 4000) == 14
    w.start([0, 1], [5, 3])
    # row 0: prompt 5, the answer's 7th token (j = 6, position 11, written to slot 5 + 6 % 4): ring slots 5..8 hold
    # j 4, 5, 6, 3 = positions 9, 10, 11, 8 (the last 4, itself included)
    # row 1: prompt 3, first answer token (j = 0, position 3): slot 3, the rest of the ring empty
    write, table = w.step([11, 3], 12)
    assert list(write) == [5 + 6 % 4, 3]
    assert list(table[0]) == [0, 1, 2, 3, 4, 9, 10, 11, 8, HIDDEN, HIDDEN, HIDDEN]
    assert list(table[1]) == [0, 1, 2, 3] + [HIDDEN] * 8
    # what the decoder sees (visible iff the slot's position <= q, and q - position < W for the answer's)
    q = 11
    visible = [t for t in range(12) if table[0, t] <= q]
    assert sorted(int(table[0, t]) for t in visible) == [k for k in range(q + 1) if k < 5 or q - k < 4]
    w.move(1, 0)
    assert w.prefix == {0: 3}
