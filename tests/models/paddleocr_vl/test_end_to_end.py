"""End to end through the CLI: greedy tokens equal transformers' generate, for every checkpoint layout."""

import json

import numpy as np
import pytest
from PIL import Image, ImageDraw

from ms_ocr.config_utils import load_config_json
from ms_ocr.models.paddleocr_vl.config import PaddleOCRVLConfig
from tests.cli_util import run_module
from tests.helpers.reference import reference_greedy

NEW_TOKENS = 12
# (layout, tokenizer, dtype, shard size)
VARIANTS = {
    "save_pretrained": ("transformers", "json", "float32", None),
    "hub_flat_sentencepiece": ("hub", "sentencepiece", "float32", None),
    "hub_bf16_sharded": ("hub", "json", "bfloat16", "100KB"),
}


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A small document-like page with a 3:4 aspect ratio."""
    img = Image.new("RGB", (96, 128), (250, 250, 245))
    d = ImageDraw.Draw(img)
    for i in range(6):
        d.text((6, 6 + 20 * i), f"line {i} text", fill=(0, 0, 0))
    d.rectangle([4, 100, 90, 124], outline=(0, 0, 0))
    path = tmp_path_factory.mktemp("pages") / "page.png"
    img.save(path)
    return str(path)


def cli_tokens(folder, images, *extra, env=None):
    images = [images] if isinstance(images, str) else list(images)
    proc = run_module("ms_ocr.infer", "--model", "paddleocr-vl", "--model-path", folder, "--image", *images,
                      "--task", "ocr", "--max-new-tokens", str(NEW_TOKENS), "--json", *extra, env=env)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cli_greedy_tokens_equal_reference(variant, tiny_checkpoint, page):
    layout, kind, dtype, shard = VARIANTS[variant]
    folder = tiny_checkpoint(layout, kind, dtype, shard)
    cfg = PaddleOCRVLConfig.from_dict(load_config_json(folder))
    want = reference_greedy(folder, cfg, [Image.open(page).convert("RGB")], "OCR:", NEW_TOKENS)
    (got,) = cli_tokens(folder, page)
    assert got["token_ids"] == want
    t = got["timings"]
    assert t["prompt_tokens"] > 0 and t["vision_ms"] > 0 and t["prefill_ms"] > 0 and t["load_ms"] > 0
    assert set(t["compile_ms"]) == {"vision", "prefill", "decode"}


def test_bf16_rounding_on_cpu_equals_reference_with_bf16_weights(tiny_dir, page):
    """--dtype bf16 with its products kept fp32 (MS_OCR_BF16_PRODUCTS=0, and what a CPU without bf16 dot products
    runs): the fp32 checkpoint's weights rounded to bf16, computed exactly. (Products in bf16 are gated in
    tests/matrix/suite.py and tests/demo/test_gate.py.)"""
    import torch
    cfg = PaddleOCRVLConfig.from_dict(load_config_json(tiny_dir))
    want = reference_greedy(tiny_dir, cfg, [Image.open(page).convert("RGB")], "OCR:", NEW_TOKENS,
                            weights_dtype=torch.bfloat16)
    (got,) = cli_tokens(tiny_dir, page, "--dtype", "bf16", env={"MS_OCR_BF16_PRODUCTS": "0"})
    assert got["token_ids"] == want


def test_several_images_stream_and_one_prompt(tiny_dir, tiny_checkpoint, page, tmp_path):
    tall = tmp_path / "tall.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (200, 50, 3), dtype=np.uint8)).save(tall)
    cfg = PaddleOCRVLConfig.from_dict(load_config_json(tiny_dir))
    imgs = [Image.open(p).convert("RGB") for p in (page, tall)]
    results = cli_tokens(tiny_dir, [page, str(tall), page])
    assert [r["image"] for r in results] == [page, str(tall), page]
    assert results[1]["token_ids"] == reference_greedy(tiny_dir, cfg, [imgs[1]], "OCR:", NEW_TOKENS)
    # the page's size comes back: its vision graphs were kept through the tall image (infer frees them before
    # prefill only when no size seen so far comes back), so its second run compiled nothing for vision
    assert results[2]["token_ids"] == results[0]["token_ids"]
    assert results[0]["timings"]["compile_ms"]["vision"] > 0 and results[2]["timings"]["compile_ms"]["vision"] == 0
    # two images in one prompt: the hub template wraps each in start/end tokens (with the bare placeholders
    # of the save_pretrained layout the reference merges adjacent images into one run and fails)
    hub = tiny_checkpoint("hub", "json")
    (joint,) = cli_tokens(hub, [page, str(tall)], "--one-prompt")
    assert joint["token_ids"] == reference_greedy(hub, cfg, imgs, "OCR:", NEW_TOKENS)
    streamed = run_module("ms_ocr.infer", "--model", "paddleocr-vl", "--model-path", tiny_dir, "--image", page,
                          "--max-new-tokens", str(NEW_TOKENS), "--stream")
    assert streamed.returncode == 0, streamed.stderr
    assert streamed.stdout.rstrip("\n") == results[0]["text"]


def test_ignore_eos_runs_the_answer_to_its_token_budget(tiny_dir, page, tmp_path):
    """--ignore-eos (the benchmarks' forced answers): with the answer's third greedy token made the checkpoint's
    end-of-text, the answer stops there without the flag and runs to --max-new-tokens with it, the same tokens."""
    import shutil
    (free,) = cli_tokens(tiny_dir, page)
    eos = free["token_ids"][2]
    assert eos not in free["token_ids"][:2]
    folder = tmp_path / "eos"
    shutil.copytree(tiny_dir, folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    (stopped,) = cli_tokens(str(folder), page)
    assert stopped["token_ids"] == free["token_ids"][:3] and stopped["finish_reason"] == "stop"
    (forced,) = cli_tokens(str(folder), page, "--ignore-eos")
    assert forced["token_ids"] == free["token_ids"] and len(forced["token_ids"]) == NEW_TOKENS
    assert forced["finish_reason"] == "length"
