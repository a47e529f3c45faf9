"""Tokenizer parity with transformers' AutoTokenizer on the tiny PaddleOCR-VL tokenizer in every file layout."""

import json
import os
import random

import pytest

from ms_ocr.config_utils import CheckpointError
from ms_ocr.processing.tokenizer import Tokenizer
from bench.paddle_tokens import TOKEN_IDS
from bench.tiny_tokenizer import train_spm, write_tokenizer
from tests.helpers.tiny_tokenizer import copy_tokenizer

STRINGS = [
    "Hello world", "OCR:", "", " ", "   leading and trailing   ", "a  b   c", "line one\nline two\n\n",
    "tab\tsep",
    "<|begin_of_sentence|>User: <|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>OCR:\nAssistant: ",
    "<|IMAGE_PLACEHOLDER|><|IMAGE_PLACEHOLDER|>x", "text</s>after", "<s>the<s>", "<|LOC_0|> and <|LOC_1|>",
    "<unk> <mask:1>", "</s", "<|IMAGE_PLACEHOLDER", "Ünïcödé ﬁ ½ Ａ", "中文 识别", "emoji 😀 ok", "x" * 200,
    "Table Recognition: 1,234.5 (total) [ok] {a: b}",
]
_CHARS = "abcdefgh XYZ.,:\n\té中<>|_/s"
STRINGS += ["".join(random.Random(i).choice(_CHARS) for _ in range(random.Random(-i).randint(1, 40)))
            for i in range(60)]


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory):
    """{(kind, layout): folder} with only tokenizer files and a config.json naming the model type."""
    dirs = {}
    for kind in ("json", "sentencepiece"):
        for layout in ("transformers", "hub"):
            out = tmp_path_factory.mktemp(f"tok_{kind}_{layout}")
            (out / "config.json").write_text(json.dumps({"model_type": "paddleocr_vl"}))
            write_tokenizer(str(out), kind, layout, seed=0)
            dirs[kind, layout] = str(out)
    return dirs


def _pair(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder), Tokenizer.from_dir(folder)


def _assert_parity(folder, strings=STRINGS):
    ref, ours = _pair(folder)
    for text in strings:
        ids = ref(text)["input_ids"]
        assert ours.encode(text) == ids, text
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(
                ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False), (text, skip)
    assert ours.all_special_ids == ref.all_special_ids
    assert ours.special_tokens == ref.special_tokens_map
    assert len(ours) == len(ref)
    return ref, ours


@pytest.mark.parametrize("kind", ["json", "sentencepiece"])
@pytest.mark.parametrize("layout", ["transformers", "hub"])
def test_encode_decode_match_transformers(tokenizer_dirs, kind, layout):
    ref, ours = _assert_parity(tokenizer_dirs[kind, layout])
    # the hub's ERNIE setup adds no BOS; specials keep the ids the model config uses
    assert ours.encode("<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>") == [387, 386, 388]
    assert ours.all_special_ids == [1, 2, 0, 385, 384, 390, 386, 387, 388, 389]
    assert ours.token_to_id("<|IMAGE_PLACEHOLDER|>") == TOKEN_IDS["<|IMAGE_PLACEHOLDER|>"] == 386
    assert ours.id_to_token(386) == "<|IMAGE_PLACEHOLDER|>" and ours.id_to_token(2) == "</s>"
    assert ours.token_to_id("<|no such token|>") is None and ours.eos_token_id == 2
    assert ours.decode(ours.encode("User: OCR:\n")) == "User: OCR:\n"
    # special tokens are skipped on decode, plain added tokens are kept
    assert ours.decode([384, 391, 2]) == "<|LOC_0|>" and ours.decode([384, 391, 2], False) == (
        "<|begin_of_sentence|><|LOC_0|></s>")
    expected = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "<|end_of_sentence|>",
                "pad_token": "<unk>", "cls_token": "<|begin_of_sentence|>", "mask_token": "<mask:1>"}
    if layout == "transformers":
        expected["image_token"] = "<|IMAGE_PLACEHOLDER|>"  # a `*_token` config key is a named special
    assert ours.special_tokens == expected


def test_split_multibyte_decodes_to_replacement_chars(tokenizer_dirs):
    for kind in ("json", "sentencepiece"):
        ref, ours = _pair(tokenizer_dirs[kind, "hub"])
        ids = ours.encode("é中")
        # the dummy prefix "▁", then byte fallback: 2 + 3 UTF-8 bytes
        assert ours.id_to_token(ids[0]) == "▁" and len(ids) == 6
        for cut in range(len(ids) + 1):
            assert ours.decode(ids[:cut] + [341]) == ref.decode(ids[:cut] + [341], skip_special_tokens=True)
        # a byte run that is not valid UTF-8 becomes one U+FFFD per byte, the complete "é" included
        assert ours.decode(ids[1:5]) == "\ufffd" * 4 and ours.decode(ids[1:3]) == "é"
        assert ours.decode([99999, 341]) == "H"


def test_sentencepiece_honours_add_bos_and_eos(tokenizer_dirs, tmp_path):
    folder = copy_tokenizer(tokenizer_dirs["sentencepiece", "hub"], str(tmp_path), add_bos_token=True,
                            add_eos_token=True)
    ref, ours = _assert_parity(folder)
    assert ours.encode("OCR:")[0] == 1 and ours.encode("OCR:")[-1] == 2
    assert ours.encode("OCR:", add_special_tokens=False) == ours.encode("OCR:")[1:-1]


@pytest.mark.parametrize("legacy, options", [
    (False, {}),
    (False, {"normalization_rule_name": "nmt_nfkc", "remove_extra_whitespaces": True}),
    (True, {"normalization_rule_name": "nmt_nfkc", "remove_extra_whitespaces": True,
            "user_defined_symbols": ["USR1", "USR2"]}),
    (False, {"model_type": "unigram", "user_defined_symbols": ["USR1", "USR2"]}),
    (True, {"add_dummy_prefix": False}),
])
def test_sentencepiece_model_settings(tokenizer_dirs, tmp_path, legacy, options):
    """transformers converts a bare tokenizer.model by its own normaliser spec (character map, extra-space removal,
    dummy prefix) and the config's `legacy` (each span between added tokens prefixed, or only the first);
    user-defined pieces stay the model's, emitted whole."""
    folder = copy_tokenizer(tokenizer_dirs["sentencepiece", "hub"], str(tmp_path), legacy=legacy)
    with open(os.path.join(folder, "tokenizer.model"), "wb") as f:
        f.write(train_spm(0, **options))
    extra = ["  x", " USR1 hello<|IMAGE_START|>USR2", "xUSR1y", " <|IMAGE_START|>b", "a <|IMAGE_START|> b ",
             "\u3000full width\u3000space ｆｕｌｌ", "<|LOC_0|>  <|LOC_1|>  "]
    ref, ours = _assert_parity(folder, STRINGS + extra)
    if "user_defined_symbols" in options:
        assert ref.convert_ids_to_tokens(ours.encode("xUSR1y")) == ["▁", "x", "USR1", "y"]


def test_tokenizer_json_ignores_add_bos_token(tokenizer_dirs, tmp_path):
    # transformers drops add_bos/eos_token from the config when tokenizer.json exists: its post-processor rules
    folder = copy_tokenizer(tokenizer_dirs["json", "hub"], str(tmp_path), add_bos_token=True)
    ref, ours = _assert_parity(folder)
    assert ours.encode("OCR:")[0] != 1


def test_tokenizer_json_post_processor_bos(tokenizer_dirs, tmp_path):
    folder = copy_tokenizer(tokenizer_dirs["json", "hub"], str(tmp_path))
    path = os.path.join(folder, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)
    ref, ours = _assert_parity(folder)
    assert ours.encode("OCR:")[0] == 1 and ours.encode("OCR:", add_special_tokens=False)[0] != 1


@pytest.mark.parametrize("kind", ["json", "sentencepiece"])
def test_legacy_special_token_files(tokenizer_dirs, tmp_path, kind):
    """Without added_tokens_decoder, special_tokens_map.json and added_tokens.json decide (older hub repos)."""
    src = tokenizer_dirs["sentencepiece", "hub"]
    folder = copy_tokenizer(src, str(tmp_path / "a"), added_tokens_decoder=None)
    if kind == "json":
        folder = copy_tokenizer(tokenizer_dirs["json", "hub"], str(tmp_path / "b"), added_tokens_decoder=None)
        for name in ("special_tokens_map.json", "added_tokens.json"):
            with open(os.path.join(src, name), encoding="utf-8") as f:
                content = f.read()
            with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
                f.write(content)
    _assert_parity(folder)
    # With no extra-special list in tokenizer_config.json, transformers takes special_tokens_map.json's list for
    # tokenizer.json but the model's control pieces (<s>, </s>) for a sentencepiece model: the image tokens are
    # then plain added tokens that decode keeps.
    _, ours = _assert_parity(copy_tokenizer(folder, str(tmp_path / "c"), additional_special_tokens=None,
                                            extra_special_tokens=None))
    if kind == "json":
        assert ours.all_special_ids == [1, 2, 0, 385, 384, 390, 386, 387, 388, 389] and ours.decode([386, 341]) == "H"
    else:
        assert ours.all_special_ids == [1, 2, 0, 385, 384, 390]
        assert ours.decode([386, 341]) == "<|IMAGE_PLACEHOLDER|>H"


def test_model_specific_tokens_become_named_specials(tokenizer_dirs, tmp_path):
    folder = copy_tokenizer(tokenizer_dirs["json", "hub"], str(tmp_path), sys_start_token="<|LOC_0|>",
                            extra_special_tokens={"video_token": "<|VIDEO_PLACEHOLDER|>"})
    _, ours = _assert_parity(folder)
    assert ours.special_tokens["sys_start_token"] == "<|LOC_0|>"
    assert ours.special_tokens["video_token"] == "<|VIDEO_PLACEHOLDER|>"
    assert ours.all_special_ids == [1, 2, 0, 385, 384, 390, 391, 389]


def test_missing_tokenizer_files(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="no tokenizer.json or tokenizer.model in"):
        Tokenizer.from_dir(str(tmp_path))
