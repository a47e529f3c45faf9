"""Config audit: every field ms_ocr reads from config.json has the value transformers 5.25's config class gives
it, for the hub's flat files and transformers' nested ones, with every field set away from its default."""

import copy

import pytest

from tests.matrix.layouts import _text_level


def _distinct(raw, values):
    """A copy of `raw` with the decoder fields in `values` set where the layout keeps them."""
    out = copy.deepcopy(raw)
    _text_level(out).update(values)
    return out


def _paddle_raws():
    from tests.helpers import tiny_paddle as tp
    flat = tp.hub_config_json("float32")
    nested = tp.tiny_config().to_dict()
    return {"hub_flat": flat, "nested": nested}


def _hunyuan_raws():
    from tests.helpers import tiny_hunyuan as th
    return {"hub_flat": th.hub_config_json("float32"), "nested": th.tiny_config().to_dict()}


# Values no default has (the fields our decoders read); eos as a list where the file may carry one.
TEXT_VALUES = dict(rms_norm_eps=3e-5, max_position_embeddings=5555, bos_token_id=7, eos_token_id=[9, 11],
                   pad_token_id=5)


@pytest.mark.parametrize("layout", ["hub_flat", "nested"])
@pytest.mark.parametrize("tie", [True, False])
def test_paddleocr_vl_fields_read_as_transformers_reads_them(layout, tie):
    from transformers import PaddleOCRVLConfig as Ref

    from ms_ocr.models.paddleocr_vl.config import PaddleOCRVLConfig, TextConfig
    raw = _distinct(_paddle_raws()[layout], dict(TEXT_VALUES, tie_word_embeddings=tie))
    raw["tie_word_embeddings"] = tie
    ref, ours = Ref.from_dict(copy.deepcopy(raw)), PaddleOCRVLConfig.from_dict(copy.deepcopy(raw))
    for name in TextConfig.__dataclass_fields__:
        if name in ("rope_theta", "mrope_section"):
            continue
        want = getattr(ref.text_config, name)
        if name == "tie_word_embeddings":
            want = ref.tie_word_embeddings  # what its loader reads (before the stored-head check)
        assert getattr(ours.text, name) == want, name
    rope = ref.text_config.rope_parameters
    assert ours.text.rope_theta == rope["rope_theta"] and ours.text.mrope_section == rope["mrope_section"]
    for name in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "patch_size",
                 "spatial_merge_size", "layer_norm_eps", "hidden_act"):
        assert getattr(ours.vision, name) == getattr(ref.vision_config, name), name
    for name in ("image_token_id", "vision_start_token_id", "vision_end_token_id"):
        assert getattr(ours, name) == getattr(ref, name), name


@pytest.mark.parametrize("layout", ["hub_flat", "nested"])
@pytest.mark.parametrize("tie", [True, False])
def test_hunyuan_fields_read_as_transformers_reads_them(layout, tie):
    from transformers import HunYuanVLConfig as Ref

    from ms_ocr.models.hunyuan_vl.config import HunyuanOCRConfig, TextConfig
    raw = _distinct(_hunyuan_raws()[layout], dict(TEXT_VALUES, tie_word_embeddings=tie))
    raw["tie_word_embeddings"] = tie
    if layout == "hub_flat":
        raw.update(pad_id=5, pad_token_id=-1)  # the hub file's pair: the legacy key wins
    ref, ours = Ref.from_dict(copy.deepcopy(raw)), HunyuanOCRConfig.from_dict(copy.deepcopy(raw))
    for name in TextConfig.__dataclass_fields__:
        if name in ("rope_theta", "rope_alpha", "xdrope_section"):
            continue
        want = ref.tie_word_embeddings if name == "tie_word_embeddings" else getattr(ref.text_config, name)
        assert getattr(ours.text, name) == want, name
    rope = ref.text_config.rope_parameters
    assert ours.text.rope_theta == rope["rope_theta"] and ours.text.rope_alpha == rope["alpha"]
    assert ours.text.xdrope_section == list(rope.get("mrope_section") or rope["xdrope_section"])
    # im_start_id / im_end_id / im_newline_id are read by neither model (the processors take those tokens from
    # the tokenizer; transformers leaves the flat file's image_start_token_id ... at its defaults)
    assert ours.image_token_id == ref.image_token_id
