"""Find a model's checkpoint folder: --model-path, the default cache, or a hub download when possible."""

import os

from ms_ocr.config_utils import CheckpointError
from ms_ocr import models


class WeightsNotFound(CheckpointError):
    pass


def default_dir(name):
    home = os.environ.get("MS_OCR_HOME")
    base = home if home else os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr")
    return os.path.join(base, name)


def _try_download(hub_id, dest, subfolder=None):
    """Best effort: huggingface_hub, then modelscope, when installed and the network allows. With a
    subfolder only its files are fetched and the subfolder is returned."""
    if os.environ.get("MS_OCR_OFFLINE") or os.environ.get("HF_HUB_OFFLINE"):
        return None
    extra = {"allow_patterns": [f"{subfolder}/*"]} if subfolder else {}
    for module, fn in (("huggingface_hub", "snapshot_download"), ("modelscope", "snapshot_download")):
        try:
            got = getattr(__import__(module), fn)(hub_id, local_dir=dest, **extra)
        except Exception:  # not installed, offline, or refused: fall through to the next source
            continue
        return os.path.join(got, subfolder) if subfolder and got else got
    return None


def locate(name, model_path=None):
    """The folder holding `name`'s checkpoint, or WeightsNotFound with one line on how to get it."""
    spec = models.get(name)
    return locate_folder(name, spec.hub_id, model_path, spec.hub_subfolder)


LAYOUT_HUB_ID = "PaddlePaddle/PP-DocLayoutV2_safetensors"


def locate_layout(model_path=None):
    """The PP-DocLayoutV2 checkpoint folder (transformers layout, safetensors) of the document pipeline."""
    return locate_folder("pp-doclayout-v2", LAYOUT_HUB_ID, model_path, flag="--layout-model-path")


def locate_folder(name, hub_id, model_path=None, sub=None, flag="--model-path"):
    if model_path:
        if not os.path.isdir(model_path):
            raise WeightsNotFound(f"model path {model_path} does not exist or is not a folder")
        return model_path
    folder = default_dir(name)
    for candidate in (folder, os.path.join(folder, sub) if sub else None):
        if candidate and os.path.isfile(os.path.join(candidate, "config.json")):
            return candidate
    got = _try_download(hub_id, folder, sub)
    if got and os.path.isfile(os.path.join(got, "config.json")):
        return got
    include = f" --include '{sub}/*'" if sub else ""
    raise WeightsNotFound(
        f"no {name} weights found: download {hub_id} (e.g. `huggingface-cli download {hub_id}{include} "
        f"--local-dir {folder}`) or pass {flag} DIR")
