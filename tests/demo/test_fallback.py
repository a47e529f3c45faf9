"""`infer` without --model: the embedded demo checkpoint runs only when it exists and no weights are found, says so
on stderr, and `--model paddleocr-vl` never falls back to it."""

import json
import os

import pytest

import ms_ocr.models
from ms_ocr import infer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "invoice.png")


@pytest.fixture
def demo(tiny_checkpoint, monkeypatch, capsys):
    """A tiny random checkpoint in the hub's layout standing in for the embedded demo."""
    folder = tiny_checkpoint("hub", "json", "bfloat16")
    capsys.readouterr()  # building it logs transformers warnings
    monkeypatch.setattr(ms_ocr.models, "DEMO_DIR", folder)
    return folder


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty weights cache (MS_OCR_HOME) and no downloads."""
    monkeypatch.setenv("MS_OCR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MS_OCR_OFFLINE", "1")
    return tmp_path / "home"


def test_no_demo_keeps_the_model_required_error(home, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ms_ocr.models, "DEMO_DIR", str(tmp_path / "no_demo"))
    assert infer.main(["--image", EXAMPLE]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: the following arguments are required: --model"]


def test_weights_in_the_cache_keep_the_model_required_error(home, demo, capsys):
    (home / "paddleocr-vl").mkdir(parents=True)
    (home / "paddleocr-vl" / "config.json").write_text("{}")
    assert infer.main(["--image", EXAMPLE]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["error: the following arguments are required: --model"]


def test_named_model_never_falls_back(home, demo, capsys):
    assert infer.main(["--model", "paddleocr-vl", "--image", EXAMPLE]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no paddleocr-vl weights found"), err


def test_demo_runs_without_model(home, demo, graph_mode, capsys):
    assert infer.main(["--image", EXAMPLE, "--json", "--max-new-tokens", "6"]) == 0
    out, err = capsys.readouterr()
    notes = err.strip().splitlines()
    assert len(notes) == 2 and "built-in demo model" in notes[0] and "--model paddleocr-vl" in notes[1], notes
    assert infer.main(["--model", "paddleocr-vl", "--model-path", demo, "--image", EXAMPLE, "--json",
                       "--max-new-tokens", "6"]) == 0
    explicit, err = capsys.readouterr()
    assert err == ""
    got, want = json.loads(out), json.loads(explicit)
    assert got["token_ids"] == want["token_ids"] and len(got["token_ids"]) >= 1
