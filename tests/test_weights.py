"""Where weights are looked for: --model-path, $MS_OCR_HOME/<model>, then a hub download when possible."""

import sys
import types

import pytest

from ms_ocr.weights import WeightsNotFound, default_dir, locate


def _ckpt(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_explicit_path_wins(tmp_path):
    assert locate("paddleocr-vl", str(_ckpt(tmp_path / "x"))) == str(tmp_path / "x")


def test_default_folder_under_ms_ocr_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MS_OCR_HOME", str(tmp_path))
    _ckpt(tmp_path / "paddleocr-vl")
    assert default_dir("paddleocr-vl") == str(tmp_path / "paddleocr-vl")
    assert locate("paddleocr-vl") == str(tmp_path / "paddleocr-vl")


def test_hub_download_when_available(tmp_path, monkeypatch):
    calls = []

    def snapshot_download(repo_id, local_dir):
        calls.append(repo_id)
        _ckpt(tmp_path / "dl")
        return str(tmp_path / "dl")

    monkeypatch.setenv("MS_OCR_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MS_OCR_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    assert locate("paddleocr-vl") == str(tmp_path / "dl")
    assert calls == ["PaddlePaddle/PaddleOCR-VL"]


def test_hub_subfolder_download_for_hunyuan(tmp_path, monkeypatch):
    calls = []

    def snapshot_download(repo_id, local_dir, allow_patterns=None):
        calls.append((repo_id, allow_patterns))
        _ckpt(tmp_path / "dl" / "v1.0")
        return str(tmp_path / "dl")

    monkeypatch.setenv("MS_OCR_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MS_OCR_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    assert locate("hunyuan-ocr") == str(tmp_path / "dl" / "v1.0")
    assert calls == [("tencent/HunyuanOCR", ["v1.0/*"])]
    # a folder downloaded by hand with its v1.0/ subfolder is found without downloading again
    _ckpt(tmp_path / "home" / "hunyuan-ocr" / "v1.0")
    assert locate("hunyuan-ocr") == str(tmp_path / "home" / "hunyuan-ocr" / "v1.0")


def test_offline_without_weights_says_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setenv("MS_OCR_HOME", str(tmp_path))
    monkeypatch.setenv("MS_OCR_OFFLINE", "1")
    with pytest.raises(WeightsNotFound) as e:
        locate("paddleocr-vl")
    msg = str(e.value)
    assert "\n" not in msg and "PaddlePaddle/PaddleOCR-VL" in msg and str(tmp_path / "paddleocr-vl") in msg


def test_unknown_model_name():
    with pytest.raises(ValueError, match="unknown model"):
        locate("nope")
