"""DeepSeek-OCR v1 end to end through the CLI on a checkpoint made of the golden DeepEncoder weights and a tiny
MoE decoder: greedy tokens equal a reference built from the official code's own image features (golden) fed
to transformers' DeepseekOcr2TextModel (the v1 decoder); grounding parser; bad inputs."""

import json

import pytest

from ms_ocr.models.deepseek_ocr.grounding import parse_grounding
from tests.cli_util import assert_one_line_error, run_module
from tests.helpers.golden_v1 import base_page, golden, make_v1_checkpoint, v1_greedy

NEW_TOKENS = 10


@pytest.fixture(scope="module")
def v1(tmp_path_factory):
    folder, text, head = make_v1_checkpoint(str(tmp_path_factory.mktemp("ds1")))
    page = base_page(tmp_path_factory.mktemp("ds1_page") / "page.png")
    return folder, text, head, page


def reference_tokens(folder, text, head, prompt):
    return v1_greedy(text, head, folder, golden()["asm.base_noTiles"], prompt, NEW_TOKENS)[0]  # official features


def test_cli_greedy_tokens_equal_golden_reference(v1):
    folder, text, head, page = v1
    want = reference_tokens(folder, text, head, "Free OCR.")
    proc = run_module("ms_ocr.infer", "--model", "deepseek-ocr", "--model-path", folder, "--image", page,
                      "--mode", "base", "--task", "ocr", "--no-repeat-ngram", "0", "--max-new-tokens",
                      str(NEW_TOKENS), "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    n = len(got["token_ids"])
    assert got["token_ids"] == want[:n]
    assert n == NEW_TOKENS or got["token_ids"][-1] == 361  # stopped early only on eos


def test_v1_checkpoint_is_not_v2_and_mode_is_v1_only(v1, hunyuan_checkpoint):
    folder, _, _, page = v1
    proc = run_module("ms_ocr.infer", "--model", "deepseek-ocr2", "--model-path", folder, "--image", page)
    assert_one_line_error(proc, "clip")
    proc = run_module("ms_ocr.infer", "--model", "hunyuan-ocr", "--model-path", hunyuan_checkpoint(), "--image", page,
                      "--mode", "base")
    assert_one_line_error(proc, "--mode")


def test_grounding_parser_on_hand_written_output():
    text = ("<|ref|>title<|/ref|><|det|>[[100, 50, 899, 120]]<|/det|>\n# Report\n\n"
            "<|ref|>image<|/ref|><|det|>[[0, 200, 499, 700], [500, 200, 998, 700]]<|/det|>\n"
            "<|ref|>text<|/ref|><|det|>[[10,750,990,990]]<|/det|>\nBody \\coloneqq text.")
    items, md = parse_grounding(text, 1000, 2000)
    assert [i["label"] for i in items] == ["title", "image", "text"]
    assert items[0]["boxes"] == [[100, 100, 899, 240]]  # int(v / 999 * size)
    assert len(items[1]["boxes"]) == 2 and items[0]["text"] == "# Report"
    assert md == "\n# Report\n\n![](images/0.jpg)\n\n\nBody := text."
    bad, _ = parse_grounding("<|ref|>x<|/ref|><|det|>[[1, 2]]<|/det|>rest", 10, 10)
    assert bad == [{"label": "x", "boxes": [], "text": "rest"}]  # malformed boxes: the item stays, no box
