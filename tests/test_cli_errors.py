"""Bad input ends with one `error:` line and a non-zero exit, never a traceback."""

import json
import os

import numpy as np
import pytest
from PIL import Image

from tests.cli_util import assert_one_line_error, run_module


@pytest.fixture(scope="module")
def good_png(tmp_path_factory):
    path = tmp_path_factory.mktemp("img") / "ok.png"
    Image.fromarray(np.full((64, 48, 3), 200, np.uint8)).save(path)
    return str(path)


def infer(*args, env=None):
    return run_module("ms_ocr.infer", *args, env=env)


def test_missing_image(tmp_path):
    p = infer("--model", "paddleocr-vl", "--model-path", str(tmp_path), "--image", str(tmp_path / "nope.png"))
    assert_one_line_error(p, "nope.png")


def test_not_an_image(tmp_path):
    bad = tmp_path / "text.png"
    bad.write_text("hello, I am not a PNG")
    assert_one_line_error(infer("--model", "paddleocr-vl", "--model-path", str(tmp_path), "--image", str(bad)),
                          "text.png")


def test_truncated_image(tmp_path, good_png):
    data = open(good_png, "rb").read()
    cut = tmp_path / "cut.png"
    cut.write_bytes(data[: len(data) // 2])
    assert_one_line_error(infer("--model", "paddleocr-vl", "--model-path", str(tmp_path), "--image", str(cut)),
                          "cut.png")


def test_unknown_option(good_png):
    assert_one_line_error(infer("--model", "paddleocr-vl", "--image", good_png, "--frobnicate"), "frobnicate")


def test_unknown_model(good_png):
    assert_one_line_error(infer("--model", "no-such-model", "--image", good_png), "no-such-model")


def test_missing_model_path(tmp_path, good_png):
    assert_one_line_error(infer("--model", "paddleocr-vl", "--model-path", str(tmp_path / "absent"),
                                "--image", good_png), "absent")


def test_no_weights_says_how_to_get_them(tmp_path, good_png):
    p = infer("--model", "paddleocr-vl", "--image", good_png, env={"MS_OCR_HOME": str(tmp_path)})
    assert_one_line_error(p, "PaddlePaddle/PaddleOCR-VL", "--model-path")


def test_wrong_checkpoint_for_model(tmp_path, good_png):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_vl"}))
    assert_one_line_error(infer("--model", "paddleocr-vl", "--model-path", str(tmp_path), "--image", good_png),
                          "qwen2_vl")


def test_extreme_aspect_ratio(tmp_path, tiny_dir):
    strip = tmp_path / "strip.png"
    Image.fromarray(np.full((10, 3000, 3), 128, np.uint8)).save(strip)
    assert_one_line_error(infer("--model", "paddleocr-vl", "--model-path", tiny_dir, "--image", str(strip)),
                          "aspect ratio", "the image is 3000x10 pixels")  # its own size, not the enlarged one


def test_unknown_task(tiny_dir, good_png):
    assert_one_line_error(infer("--model", "paddleocr-vl", "--model-path", tiny_dir, "--image", good_png,
                                "--task", "poetry"), "poetry")


def test_dump_folder_that_cannot_be_made(tmp_path, tiny_dir, good_png):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    assert_one_line_error(infer("--model", "paddleocr-vl", "--model-path", tiny_dir, "--image", good_png,
                                "--dump", str(blocker / "dumps")), "--dump", "a_file")


def test_corrupt_weights(tmp_path, tiny_dir, good_png):
    import shutil
    bad = tmp_path / "ckpt"
    shutil.copytree(tiny_dir, bad)
    for fn in os.listdir(bad):
        if fn.endswith(".safetensors"):
            data = (bad / fn).read_bytes()
            (bad / fn).write_bytes(data[: len(data) // 3])
    assert_one_line_error(infer("--model", "paddleocr-vl", "--model-path", str(bad), "--image", good_png),
                          "truncated")


def test_request_longer_than_max_positions(tiny_dir, good_png):
    # the tiny checkpoint has max_position_embeddings 4096
    assert_one_line_error(infer("--model", "paddleocr-vl", "--model-path", tiny_dir, "--image", good_png,
                                "--max-new-tokens", "5000"), "max_position_embeddings (4096)")


def test_int8_without_the_native_kernels_is_refused(tiny_dir, good_png):
    """--quantize int8 where the native kernels are not loaded: the composed route widened every matrix to fp32 in
    each step's graph (DeepSeek-OCR-2: 18.7 GB peak, 458 ms a token, against 5.7 GB and ~42 ms with the kernels)."""
    r = infer("--model", "paddleocr-vl", "--model-path", tiny_dir, "--image", good_png, "--quantize", "int8",
              "--max-new-tokens", "2", env={"MS_OCR_NATIVE": "0"})
    assert_one_line_error(r, "--quantize int8 needs ms_ocr's native CPU kernels")


def test_config_json_that_is_a_list_names_the_file(tmp_path, tiny_dir, good_png):
    import shutil
    bad = tmp_path / "ckpt"
    shutil.copytree(tiny_dir, bad)
    (bad / "config.json").write_text("[1, 2]")
    assert_one_line_error(infer("--model", "paddleocr-vl", "--model-path", str(bad), "--image", good_png),
                          f"{bad}/config.json holds an array, not a JSON object")


def test_broken_tokenizer_json_names_the_file(tmp_path, tiny_dir, good_png):
    import shutil
    bad = tmp_path / "ckpt"
    shutil.copytree(tiny_dir, bad)
    data = (bad / "tokenizer.json").read_bytes()
    (bad / "tokenizer.json").write_bytes(data[:300])  # cut inside a string
    assert_one_line_error(infer("--model", "paddleocr-vl", "--model-path", str(bad), "--image", good_png),
                          f"{bad}/tokenizer.json is not a readable tokenizer file (EOF while parsing")


def test_ctrl_c_while_mindspore_loads(tiny_dir, good_png):
    """SIGINT during `import mindspore` aborted the interpreter (rc -6, 'Fatal Python error', a traceback)."""
    import signal
    import subprocess
    import sys
    import time
    from tests.cli_util import ROOT
    env = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3", MS_OCR_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "ms_ocr.infer", "--model", "paddleocr-vl", "--model-path", tiny_dir,
                             "--image", good_png], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and "mindspore" not in open(f"/proc/{proc.pid}/maps").read():
        time.sleep(0.005)
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err, out) == (130, "error: interrupted\n", "")


@pytest.mark.parametrize("module,flags,needle", [
    ("ms_ocr.infer", ["--seed", "-1"], "--seed must be in 0..2**64-1, not -1"),
    ("ms_ocr.infer", ["--threads", "-1"], "--threads must be at least 1, not -1"),
    ("ms_ocr.infer", ["--top-p", "0"], "--top-p must be in (0, 1]"),
    ("ms_ocr.batch", ["--out", "x", "--dpi", "3000"], "--dpi must be in 10..600, not 3000"),
    ("ms_ocr.pipeline", ["--out", "x", "--dpi", "3000"], "--dpi must be in 10..600, not 3000"),
])
def test_shared_options_out_of_range_name_their_flag(module, flags, needle, good_png):
    """`--seed -1` reached numpy ("expected non-negative integer") and `--threads -1` MindSpore; `--dpi 3000`
    cost ~1.1 GB a page. Each is now refused before anything loads, naming the flag."""
    model = ["--recognizer", "paddleocr-vl"] if module == "ms_ocr.pipeline" else ["--model", "paddleocr-vl"]
    image = ["--input" if module == "ms_ocr.batch" else "--image", good_png]
    assert_one_line_error(run_module(module, *model, *image, *flags), needle)


@pytest.mark.parametrize("module,args,needle", [
    ("ms_ocr.export", ("--model", "paddleocr-vl", "--out", "x", "--frobnicate"), "frobnicate"),
    ("ms_ocr.export", ("--model", "paddleocr-vl"), "--out"),  # a required option missing
    ("ms_ocr.export", ("--model", "no-such-model", "--out", "x"), "no-such-model"),
    ("ms_ocr.export", ("--model", "hunyuan-ocr", "--out", "x", "--mode", "tiny"), "--mode applies to deepseek-ocr"),
    ("ms_ocr.convert", ("--model", "paddleocr-vl", "--src", "a"), "--dst"),
    ("ms_ocr.convert", ("--model", "paddleocr-vl", "--src", "a", "--dst", "b", "--frobnicate"), "frobnicate"),
    ("ms_ocr.convert", ("--model", "no-such-model", "--src", "a", "--dst", "b"), "no-such-model"),
])
def test_export_and_convert_usage_errors_are_one_line(module, args, needle):
    """The export and convert command lines answer a wrong option as the others do: one `error:` line, exit 2 (they
    printed argparse's usage block above it)."""
    proc = run_module(module, *args)
    assert_one_line_error(proc, needle)
    assert proc.returncode == 2
