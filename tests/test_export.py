"""MindIR export round trips: the exported vision graphs and text graph (in-place KV cache) reproduce the live
model's image tokens and logits, and `infer --mindir` gives the live model's greedy tokens, for PaddleOCR-VL,
HunyuanOCR, DeepSeek-OCR-2 and DeepSeek-OCR (MoE decoders with every expert in the graph); the ONNX vision
export runs in onnxruntime."""

import json
import subprocess
import sys

import numpy as np
import pytest

from ms_ocr.generate import SamplingConfig
from tests.cli_util import ROOT, assert_one_line_error, run_module
from tests.helpers.parity import rel_err
from bench.pages import text_page

NEW = 10


def _export(model, folder, out, *extra):
    return subprocess.run([sys.executable, "-m", "ms_ocr.export", "--model", model, "--model-path", folder,
                           "--out", str(out), "--slots", "192", *extra], cwd=ROOT, capture_output=True, text=True)


def assert_served_equals_live(served, live, img, prompt):
    """Image tokens, prefill logits, four decode steps over the cache the prefill wrote, greedy tokens."""
    prep, _ = live.prepare([img], prompt)
    want_feats = live.encode_images(prep)
    got_feats = served.encode_images(prep)
    assert got_feats.shape == want_feats.shape
    assert rel_err(got_feats.asnumpy(), want_feats.asnumpy()) < 1e-5
    want = live.runtime.prefill(prep, want_feats, NEW).asnumpy()
    got = served.runtime.prefill(prep, got_feats, NEW).asnumpy()
    assert rel_err(got, want) < 1e-4
    s = prep.input_ids.shape[0]
    tok = int(np.argmax(want[0]))
    for i in range(4):
        want = live.runtime.decode(tok, s + i, prep.rope_delta, live.num_pos_axes).asnumpy()
        got = served.runtime.decode(tok, s + i, prep.rope_delta, served.num_pos_axes).asnumpy()
        assert rel_err(got, want) < 1e-4, f"decode step {i}"
        tok = int(np.argmax(want[0]))
    sampling = SamplingConfig(max_new_tokens=NEW)
    tokens = live.run([img], prompt, sampling)["token_ids"]
    assert served.run([img], prompt, sampling)["token_ids"] == tokens and len(tokens) > 0


@pytest.mark.parametrize("model", ["paddleocr-vl", "hunyuan-ocr"])
def test_mindir_round_trip(model, tiny_dir, hunyuan_checkpoint, graph_mode, tmp_path):
    from ms_ocr.export import load_mindir
    from ms_ocr.models import get as model_spec
    folder = tiny_dir if model == "paddleocr-vl" else hunyuan_checkpoint()
    proc = _export(model, folder, tmp_path / "exp")
    assert proc.returncode == 0, proc.stderr
    live = model_spec(model).load(folder, "CPU", "fp32")
    served = load_mindir(str(tmp_path / "exp"), model)
    prompt = model_spec(model).tasks["ocr"]
    for size in ((96, 128), (200, 56)):  # one vision file for every patch count
        assert_served_equals_live(served, live, text_page(*size, "export"), prompt)

    # the CLI serves the export without --model (read from meta.json) and gives the live tokens
    path = tmp_path / "page.png"
    text_page(120, 90, "export").save(path)
    out = run_module("ms_ocr.infer", "--mindir", str(tmp_path / "exp"), "--image", str(path), "--max-new-tokens",
                     str(NEW), "--json")
    assert out.returncode == 0, out.stderr
    from ms_ocr.processing.image import load_image
    want = live.run([load_image(str(path))], prompt, SamplingConfig(max_new_tokens=NEW))["token_ids"]
    assert json.loads(out.stdout.splitlines()[-1])["token_ids"] == want and len(want) > 0
    meta = json.loads((tmp_path / "exp" / "meta.json").read_text())
    assert (meta["model"], meta["slots"], meta["batch"]) == (model, 192, 1)


def test_mindir_errors(tiny_dir, tmp_path):
    proc = _export("deepseek-ocr2", tiny_dir, tmp_path / "x")  # a PaddleOCR-VL checkpoint
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert_one_line_error(run_module("ms_ocr.infer", "--mindir", str(tmp_path), "--image", "x.png"),
                          "is not a MindIR export")


# deepseek-ocr2's case (85 s on 2 cores) runs with -m slow: the default run exports v1, whose graphs take the same
# path (per-view-side vision graphs, assembly, MoE text graph, ONNX view graph)
@pytest.mark.parametrize("model", [pytest.param("deepseek-ocr2", marks=pytest.mark.slow), "deepseek-ocr"])
def test_deepseek_mindir_round_trip(model, graph_mode, tmp_path):
    """One graph per view side (tiles and global view), the assembly graph, the MoE text graph; the ONNX
    export of a view graph."""
    from ms_ocr.export import export_pipeline, load_mindir
    from ms_ocr.models import get as model_spec
    package = model_spec(model)
    if model == "deepseek-ocr2":
        from tests.helpers.tiny_deepseek import make_tiny_checkpoint
        folder = make_tiny_checkpoint(str(tmp_path / "ckpt"))
        pages = [(900, 500), (600, 400)]  # 2 tiles of 768 + the global view; the global view alone
    else:
        from tests.helpers.golden_v1 import make_v1_checkpoint
        folder = make_v1_checkpoint(str(tmp_path / "ckpt"))[0]
        pages = [(300, 170), (150, 100)]  # at this scale gundam tiles are 160 px, the global view 256 px
    live = package.load(folder, "CPU", "fp32")
    export_pipeline(live, str(tmp_path / "exp"), 640)
    meta = json.loads((tmp_path / "exp" / "meta.json").read_text())
    assert meta["vision"]["kind"] == "views" and meta["vision"]["sizes"] == live.processor.view_sizes()
    assert len(meta["vision"]["sizes"]) == 2
    served = load_mindir(str(tmp_path / "exp"), model)
    prompt = package.tasks["ocr"]
    for size in pages:
        assert_served_equals_live(served, live, text_page(*size, "export"), prompt)
    # ONNX: the global view's graph in onnxruntime equals MindSpore's, which equals the live image tokens
    import onnxruntime as ort
    from ms_ocr.export import export_vision_onnx
    small = text_page(*pages[1], "export")
    inputs, want = export_vision_onnx(live, small, str(tmp_path / "vision.onnx"))
    sess = ort.InferenceSession(str(tmp_path / "vision.onnx"))
    got = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), inputs)})[0]
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-4
    feats = live.encode_images(live.prepare([small], prompt)[0]).asnumpy()[:-1]  # without the separator
    if model == "deepseek-ocr":  # the global view's rows each end with image_newline
        g = int(np.sqrt(want.shape[0]))
        feats = feats.reshape(g, g + 1, -1)[:, :g].reshape(g * g, -1)
    assert rel_err(want, feats) < 1e-5
    if model == "deepseek-ocr":
        assert meta["mode"] == "gundam"
        path = tmp_path / "page.png"
        text_page(150, 100, "export").save(path)
        # a mode whose view size was not exported is refused in one line (a token budget the export's cache
        # holds: the budget is checked first)
        assert_one_line_error(run_module("ms_ocr.infer", "--mindir", str(tmp_path / "exp"), "--image", str(path),
                                         "--mode", "tiny", "--max-new-tokens", "16"), "no vision graph for 128-px views")


@pytest.mark.parametrize("model", ["paddleocr-vl", "hunyuan-ocr"])
def test_onnx_vision_matches_mindspore(model, tiny_dir, hunyuan_checkpoint, graph_mode, tmp_path):
    import onnxruntime as ort
    from ms_ocr.export import export_vision_onnx
    from ms_ocr.models import get as model_spec
    folder = tiny_dir if model == "paddleocr-vl" else hunyuan_checkpoint()
    pipe = model_spec(model).load(folder, "CPU", "fp32")
    path = str(tmp_path / "vision.onnx")
    inputs, want = export_vision_onnx(pipe, text_page(150, 100, "export"), path)
    # the exported graph is the live vision tower (portable kernels included)
    prep, _ = pipe.prepare([text_page(150, 100, "export")], "x")
    assert rel_err(want, pipe.encode_images(prep).asnumpy()) < 1e-5
    sess = ort.InferenceSession(path)
    got = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), inputs)})[0]
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-4
