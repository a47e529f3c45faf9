"""HunyuanOCR end to end through the CLI: greedy tokens equal transformers' generate for both layouts;
spotting boxes in --json and --visualize; bad inputs."""

import pytest
from PIL import Image

from tests.cli_util import assert_one_line_error, run_module
from tests.helpers.tiny_hunyuan import infer_json, reference_greedy

NEW_TOKENS = 12
SPOTTING = "检测并识别图片中的文字，将文本坐标格式化输出。"


def cli(folder, page, *extra):
    return infer_json(folder, page, NEW_TOKENS, *extra)[0]


@pytest.mark.parametrize("variant", ["save_pretrained", "hub_bf16_sharded"])
def test_cli_greedy_tokens_equal_reference(variant, hunyuan_checkpoint, page, tmp_path):
    reference_dir = hunyuan_checkpoint()
    if variant == "save_pretrained":
        folder, system, dtype = reference_dir, None, None
    else:
        import torch
        # v1.0's flat config, legacy keys, bf16 shards + index; run with its empty system turn
        folder, system, dtype = hunyuan_checkpoint("hub", "bfloat16", "40KB"), "", torch.bfloat16
    want = reference_greedy(reference_dir, [Image.open(page).convert("RGB")], SPOTTING, NEW_TOKENS, system, dtype)
    drawing = tmp_path / "boxes.png"
    (got,) = cli(folder, page, "--task", "spotting", "--visualize", str(drawing))
    assert got["token_ids"] == want
    assert isinstance(got["boxes"], list)  # random weights rarely emit coordinates; the parser is tested apart
    assert Image.open(drawing).size == (120, 160)


def test_unknown_task_and_visualize_without_boxes(hunyuan_checkpoint, page):
    folder = hunyuan_checkpoint()
    proc = run_module("ms_ocr.infer", "--model", "hunyuan-ocr", "--model-path", folder, "--image", page,
                      "--task", "nonsense")
    assert_one_line_error(proc, "unknown task", "spotting")
    proc = run_module("ms_ocr.infer", "--model", "hunyuan-ocr", "--model-path", folder, "--image", page,
                      "--task", "ocr", "--visualize", "x.png")
    assert_one_line_error(proc, "--visualize", "spotting")


def test_wrong_checkpoint_for_model(hunyuan_checkpoint, tiny_dir, page):
    proc = run_module("ms_ocr.infer", "--model", "hunyuan-ocr", "--model-path", tiny_dir, "--image", page)
    assert_one_line_error(proc, "paddleocr_vl", "hunyuan-ocr")
    proc = run_module("ms_ocr.infer", "--model", "paddleocr-vl", "--model-path", hunyuan_checkpoint(), "--image", page)
    assert_one_line_error(proc, "hunyuan_vl", "paddleocr-vl")


def test_missing_weights_file_is_one_line(hunyuan_checkpoint, page, tmp_path):
    import shutil
    src = hunyuan_checkpoint()
    dst = tmp_path / "broken"
    shutil.copytree(src, dst)
    (dst / "model.safetensors").unlink()
    proc = run_module("ms_ocr.infer", "--model", "hunyuan-ocr", "--model-path", str(dst), "--image", page)
    assert_one_line_error(proc)
