"""MindIR export round trips: the exported vision graph and text graph (in-place KV cache) reproduce the live
model's image tokens and logits, and `infer --mindir` gives the live model's greedy tokens, for PaddleOCR-VL and
HunyuanOCR; models whose export is not supported say so in one line."""

import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image, ImageDraw

from ms_ocr.generate import SamplingConfig
from tests.cli_util import ROOT, assert_one_line_error, run_module
from tests.helpers.parity import rel_err

NEW = 10


def _page(w, h):
    img = Image.new("RGB", (w, h), (250, 250, 240))
    d = ImageDraw.Draw(img)
    for i in range(max(1, h // 22)):
        d.text((4, 4 + 20 * i), f"export {i}", fill=(0, 0, 0))
    return img


def _export(model, folder, out, *extra):
    return subprocess.run([sys.executable, "scripts/export_mindir.py", "--model", model, "--model-path", folder,
                           "--out", str(out), "--slots", "192", *extra], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.parametrize("model", ["paddleocr-vl", "hunyuan-ocr"])
def test_mindir_round_trip(model, tiny_dir, hunyuan_checkpoint, graph_mode, tmp_path):
    from ms_ocr.export import load_mindir
    from ms_ocr.models import model_package
    folder = tiny_dir if model == "paddleocr-vl" else hunyuan_checkpoint()
    proc = _export(model, folder, tmp_path / "exp")
    assert proc.returncode == 0, proc.stderr
    live = model_package(model).load(folder, "CPU", "fp32")
    served = load_mindir(str(tmp_path / "exp"), model)
    prompt = model_package(model).TASK_PROMPTS["ocr"]
    for size in ((96, 128), (200, 56)):  # one vision file for every patch count
        img = _page(*size)
        prep, _ = live.prepare([img], prompt)
        want_feats = live.encode_images(prep)
        got_feats = served.encode_images(prep)
        assert rel_err(got_feats.asnumpy(), want_feats.asnumpy()) < 1e-5
        want = live.runtime.prefill(prep, want_feats, NEW).asnumpy()
        got = served.runtime.prefill(prep, got_feats, NEW).asnumpy()
        assert rel_err(got, want) < 1e-4
        s = prep.input_ids.shape[0]
        tok = int(np.argmax(want[0]))
        for i in range(4):  # the cache written by the prefill call is read by the decode calls
            want = live.runtime.decode(tok, s + i, prep.rope_delta, live.num_pos_axes).asnumpy()
            got = served.runtime.decode(tok, s + i, prep.rope_delta, served.num_pos_axes).asnumpy()
            assert rel_err(got, want) < 1e-4, f"decode step {i}"
            tok = int(np.argmax(want[0]))
        sampling = SamplingConfig(max_new_tokens=NEW)
        assert served.run([img], prompt, sampling)["token_ids"] == live.run([img], prompt, sampling)["token_ids"]

    # the CLI serves the export without --model (read from meta.json) and gives the live tokens
    path = tmp_path / "page.png"
    _page(120, 90).save(path)
    out = run_module("ms_ocr.infer", "--mindir", str(tmp_path / "exp"), "--image", str(path), "--max-new-tokens",
                     str(NEW), "--json")
    assert out.returncode == 0, out.stderr
    from ms_ocr.processing.image import load_image
    want = live.run([load_image(str(path))], prompt, SamplingConfig(max_new_tokens=NEW))["token_ids"]
    assert json.loads(out.stdout.splitlines()[-1])["token_ids"] == want and len(want) > 0
    meta = json.loads((tmp_path / "exp" / "meta.json").read_text())
    assert (meta["model"], meta["slots"], meta["batch"]) == (model, 192, 1)


def test_mindir_errors(tiny_dir, tmp_path):
    proc = _export("deepseek-ocr2", tiny_dir, tmp_path / "x")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert_one_line_error(run_module("ms_ocr.infer", "--mindir", str(tmp_path), "--image", "x.png"),
                          "is not a MindIR export")


def test_deepseek_export_is_refused_with_a_reason(tmp_path_factory, graph_mode):
    from ms_ocr.export import ExportError, export_pipeline
    from ms_ocr.models import deepseek_ocr2
    from tests.helpers.tiny_deepseek import make_tiny_checkpoint
    folder = make_tiny_checkpoint(str(tmp_path_factory.mktemp("ds2_export")))
    pipe = deepseek_ocr2.load(folder, "CPU", "fp32")
    with pytest.raises(ExportError, match="not supported yet|not exportable yet"):
        export_pipeline(pipe, str(tmp_path_factory.mktemp("ds2_out")), 256)


@pytest.mark.parametrize("model", ["paddleocr-vl", "hunyuan-ocr"])
def test_onnx_vision_matches_mindspore(model, tiny_dir, hunyuan_checkpoint, graph_mode, tmp_path):
    import onnxruntime as ort
    from ms_ocr.export import export_vision_onnx
    from ms_ocr.models import model_package
    folder = tiny_dir if model == "paddleocr-vl" else hunyuan_checkpoint()
    pipe = model_package(model).load(folder, "CPU", "fp32")
    path = str(tmp_path / "vision.onnx")
    inputs, want = export_vision_onnx(pipe, _page(150, 100), path)
    # the exported graph is the live vision tower (portable kernels included)
    prep, _ = pipe.prepare([_page(150, 100)], "x")
    assert rel_err(want, pipe.encode_images(prep).asnumpy()) < 1e-5
    sess = ort.InferenceSession(path)
    got = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), inputs)})[0]
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-4
