"""Find a model's checkpoint folder: --model-path, the default cache, or a hub download when possible."""

import os

from ms_ocr.config_utils import CheckpointError
from ms_ocr.models import HUB_IDS, canonical


class WeightsNotFound(CheckpointError):
    pass


def default_dir(name):
    home = os.environ.get("MS_OCR_HOME")
    base = home if home else os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr")
    return os.path.join(base, name)


def _try_download(hub_id, dest):
    """Best effort: huggingface_hub, then modelscope, when installed and the network allows."""
    if os.environ.get("MS_OCR_OFFLINE") or os.environ.get("HF_HUB_OFFLINE"):
        return None
    try:
        from huggingface_hub import snapshot_download
        return snapshot_download(hub_id, local_dir=dest)
    except Exception:  # not installed, offline, or refused: fall through to the next source
        pass
    try:
        from modelscope import snapshot_download as ms_download
        return ms_download(hub_id, local_dir=dest)
    except Exception:
        return None


def locate(name, model_path=None):
    """The folder holding `name`'s checkpoint, or WeightsNotFound with one line on how to get it."""
    key = canonical(name)
    if model_path:
        if not os.path.isdir(model_path):
            raise WeightsNotFound(f"model path {model_path} does not exist or is not a folder")
        return model_path
    folder = default_dir(name)
    if os.path.isfile(os.path.join(folder, "config.json")):
        return folder
    hub_id = HUB_IDS[key]
    got = _try_download(hub_id, folder)
    if got and os.path.isfile(os.path.join(got, "config.json")):
        return got
    raise WeightsNotFound(
        f"no {name} weights found: download {hub_id} (e.g. `huggingface-cli download {hub_id} --local-dir "
        f"{folder}`) or pass --model-path DIR")
