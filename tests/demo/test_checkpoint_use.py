"""The embedded demo checkpoint works like any checkpoint: the batch runner gives infer's tokens on the example
images (examples/, rendered by training/demo/data.py), a MindIR export reads the README's example to its exact
text, and the document pipeline runs it as its recogniser."""

import json
import os

import pytest
from PIL import Image

from ms_ocr.models import demo_checkpoint
from training.demo import data as demo_data
from tests.cli_util import ROOT, run_module

EXAMPLES = {name: text for name, text, _ in demo_data.EXAMPLES}
EXAMPLE_DIR = os.path.join(ROOT, "examples")
NEW = 128  # per crop: a line reader's lines share it (note.png's three lines take ~70)

pytestmark = pytest.mark.skipif(demo_checkpoint() is None, reason="ms_ocr/demo/paddleocr_vl holds no checkpoint yet")


def _records(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_batch_runner_reads_the_examples(tmp_path):
    out = tmp_path / "out"
    proc = run_module("ms_ocr.batch", "--model", "paddleocr-vl", "--model-path", demo_checkpoint(), "--input",
                      EXAMPLE_DIR, "--out", str(out), "--task", "ocr", "--max-batch-size", "3",
                      "--max-output-length", str(NEW), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    got = {os.path.basename(r["source"]): r for r in _records(out / "results.jsonl")}
    assert sorted(got) == sorted(EXAMPLES)
    # the batch runner's continuous batching gives the tokens infer gives one image at a time
    single = run_module("ms_ocr.infer", "--model", "paddleocr-vl", "--model-path", demo_checkpoint(), "--image",
                        *[os.path.join(EXAMPLE_DIR, name) for name in sorted(EXAMPLES)], "--task", "ocr",
                        "--max-new-tokens", str(NEW), "--json")
    assert single.returncode == 0, single.stderr
    for record in (json.loads(line) for line in single.stdout.splitlines()):
        assert got[os.path.basename(record["image"])]["token_ids"] == record["token_ids"], record["image"]
    # the single-line examples read exactly (the checkpoint before read NW11 for NW1 in address.png); the three-line
    # note.png still has two characters wrong (Roon 48 for Room 4B): the model's accuracy is the gates'
    for name in ("invoice.png", "receipt.png", "address.png"):
        assert got[name]["text"] == EXAMPLES[name], (name, got[name]["text"])
    from training.demo.model import cer
    assert cer([got[n]["text"] for n in sorted(EXAMPLES)], [EXAMPLES[n] for n in sorted(EXAMPLES)]) <= 0.05


def test_mindir_export_reads_an_example(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "ms_ocr.export", "--model", "paddleocr-vl", "--model-path",
                           demo_checkpoint(), "--out", str(tmp_path / "exp"), "--slots", "160"], cwd=ROOT,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3"))
    assert proc.returncode == 0, proc.stderr
    out = run_module("ms_ocr.infer", "--mindir", str(tmp_path / "exp"), "--image",
                     os.path.join(EXAMPLE_DIR, "invoice.png"), "--max-new-tokens", str(NEW), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["text"] == EXAMPLES["invoice.png"]


def test_pipeline_uses_it_as_the_recognizer(tmp_path):
    """A page of the example images through the pipeline (a tiny random layout detector: its boxes are
    arbitrary, so the run and its records are checked, not the text)."""
    from tests.helpers.tiny_layout import make_tiny_layout_checkpoint

    layout = make_tiny_layout_checkpoint(str(tmp_path / "layout"))
    lines = [Image.open(os.path.join(EXAMPLE_DIR, name)).convert("RGB") for name in EXAMPLES]
    page = Image.new("RGB", (max(im.width for im in lines) + 80, sum(im.height + 26 for im in lines) + 80), "white")
    y = 40
    for im in lines:
        page.paste(im, (40, y))
        y += im.height + 26
    page.save(tmp_path / "page.png")
    proc = run_module("ms_ocr.pipeline", "--image", str(tmp_path / "page.png"), "--out", str(tmp_path / "out"),
                      "--model-path", demo_checkpoint(), "--layout-model-path", layout, "--max-new-tokens",
                      str(NEW), "--layout-mode", "eager", "--keep-all-labels")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "out" / "page.json").read_text())
    assert record["layout"], "the tiny random detector finds boxes on the page"
    assert not [b for b in record["blocks"] if "error" in b]
    read = [b for b in record["blocks"] if "image" not in b]
    assert read and all(isinstance(b["content"], str) for b in read)


def test_a_line_reader_reads_each_line_of_a_crop_at_its_height(tmp_path):
    """The demo checkpoint with `text_line_height` in its preprocessor_config.json (processing/text_lines.py): the
    README's example line drawn 80 px high with paper on every side, and a block of two lines, read as the 34-px
    lines it was trained on (the checkpoint as committed reads the 80-px crop as garbage)."""
    import random
    import shutil
    ckpt = tmp_path / "ckpt"
    shutil.copytree(demo_checkpoint(), ckpt)
    with open(ckpt / "preprocessor_config.json") as f:
        config = json.load(f)
    with open(ckpt / "preprocessor_config.json", "w") as f:
        json.dump({**config, "text_line_height": 34}, f)
    text = EXAMPLES["invoice.png"]
    font = demo_data.font_path("DejaVuSerif.ttf")
    tall, _ = demo_data.render_crop([text], font, random.Random(1), 42, (60, 19, 90, 12), screen=True)
    block, _ = demo_data.render_crop(["Total due 15 Mar 2026", "Invoice #2041"], font, random.Random(2), 30,
                                     (40, 30, 40, 30), pitch=1.3, screen=True)
    assert tall.height == 80
    tall.save(tmp_path / "tall.png")
    block.save(tmp_path / "block.png")
    proc = run_module("ms_ocr.infer", "--model", "paddleocr-vl", "--model-path", str(ckpt), "--image",
                      str(tmp_path / "tall.png"), str(tmp_path / "block.png"), "--max-new-tokens", str(NEW), "--json")
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    assert got[0]["text"] == text and got[0]["timings"]["lines"] == 1
    assert got[1]["text"] == "Total due 15 Mar 2026\nInvoice #2041" and got[1]["timings"]["lines"] == 2
    # the batch runner (continuous batching over the engine: each crop's lines as requests of their own, joined
    # when the crop's last line is done) gives the same answers and tokens
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("tall.png", "block.png"):
        shutil.copy(tmp_path / name, folder / name)
    proc = run_module("ms_ocr.batch", "--model", "paddleocr-vl", "--model-path", str(ckpt), "--input", str(folder),
                      "--out", str(tmp_path / "out"), "--max-batch-size", "3", "--max-output-length", str(NEW),
                      "--no-progress")
    assert proc.returncode == 0, proc.stderr
    batch = {os.path.basename(r["source"]): r for r in _records(tmp_path / "out" / "results.jsonl")}
    for name, record in zip(("tall.png", "block.png"), got):
        assert batch[name]["text"] == record["text"] and batch[name]["token_ids"] == record["token_ids"]
    assert batch["block.png"]["timings"]["lines"] == 2


def test_a_line_reader_streams_and_serves_a_crops_lines(tmp_path, graph_mode):
    """A crop of two lines: `infer --stream` prints them on two lines as they arrive (they ran together before the
    final text, with no newline between them), and the server reads the crop line by line like infer (its lines
    decode together in one batch), streamed and whole, with usage and the metrics counting every line's prompt and
    only the generated tokens."""
    import base64
    import io
    import random

    import httpx

    from ms_ocr.generate import SamplingConfig
    from ms_ocr.infer import StreamPrinter
    from ms_ocr.models.paddleocr_vl import SPEC
    from tests.serve.live import LiveServer
    font = demo_data.font_path("DejaVuSerif.ttf")
    block, _ = demo_data.render_crop(["Total due 15 Mar 2026", "Invoice #2041"], font, random.Random(2), 30,
                                     (40, 30, 40, 30), pitch=1.3, screen=True)
    want = "Total due 15 Mar 2026\nInvoice #2041"
    pipe = SPEC.load(demo_checkpoint(), "CPU", "auto")
    printed = io.StringIO()
    printer = StreamPrinter(pipe.processor.tokenizer, pipe.eos_ids, printed)  # what infer --stream prints with
    alone = pipe.run([block], "OCR:", SamplingConfig(max_new_tokens=NEW), on_token=printer)
    assert alone["text"] == want and printed.getvalue() == want  # both lines, as they arrived
    printer.finish(alone["text"])
    assert printed.getvalue() == want + "\n"
    server = LiveServer(pipe, "paddleocr-vl", "--max-model-len", "512", "--max-num-seqs", "4", "--no-warmup")
    try:
        buf = io.BytesIO()
        block.save(buf, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
        content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "OCR:"}]
        payload = {"model": "paddleocr-vl", "messages": [{"role": "user", "content": content}], "max_tokens": NEW,
                   "temperature": 0}
        whole = httpx.post(server.url + "/v1/chat/completions", json=payload, timeout=120).json()
        assert whole["choices"][0]["message"]["content"] == want
        prompts = [p.input_ids.shape[0] for _, p in pipe.prepare_request([block], "OCR:")[1]]
        assert len(prompts) == 2 and whole["usage"]["prompt_tokens"] == sum(prompts)
        assert whole["usage"]["completion_tokens"] == len(alone["token_ids"])  # generated, not the "\n"s between
        chunks = server.client().chat.completions.create(model="paddleocr-vl", messages=payload["messages"],
                                                         max_tokens=NEW, temperature=0, stream=True)
        parts = [c.choices[0].delta.content or "" for c in chunks if c.choices]
        assert "".join(parts) == want and sum(1 for p in parts if p) > 2
        # the metrics count what usage counts: every line's prompt, the generated tokens (not the line break's)
        metrics = {line.split("{")[0]: float(line.rsplit(" ", 1)[1])
                   for line in httpx.get(server.url + "/metrics", timeout=30).text.splitlines()
                   if line.startswith("ms_ocr:") and "_bucket" not in line and "running=" not in line}
        assert metrics["ms_ocr:prompt_tokens_total"] == 2 * sum(prompts)
        assert metrics["ms_ocr:generation_tokens_total"] == 2 * len(alone["token_ids"])
    finally:
        server.close()
