import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("GLOG_v", "3")
os.environ.setdefault("MS_OCR_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """Factory: tiny_checkpoint(layout, tokenizer_kind, dtype, max_shard_size) -> folder, built once per session
    (tests/helpers/tiny_paddle.py)."""
    built = {}

    def get(layout="transformers", tokenizer_kind="json", dtype="float32", max_shard_size=None):
        key = (layout, tokenizer_kind, dtype, max_shard_size)
        if key not in built:
            from tests.helpers.tiny_paddle import make_tiny_checkpoint

            out = tmp_path_factory.mktemp(f"tiny_{layout}_{tokenizer_kind}_{dtype}")
            built[key] = make_tiny_checkpoint(str(out), layout=layout, dtype=dtype, max_shard_size=max_shard_size,
                                              tokenizer_kind=tokenizer_kind)
        return built[key]

    return get


@pytest.fixture(scope="session")
def tiny_dir(tiny_checkpoint):
    """The default tiny checkpoint: transformers layout, tokenizer.json, float32, one safetensors file."""
    return tiny_checkpoint()


@pytest.fixture(scope="session")
def graph_mode():
    import mindspore as ms

    from ms_ocr import ops as K
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    K.configure("CPU")


@pytest.fixture(scope="session")
def hunyuan_checkpoint(tmp_path_factory):
    """Factory: hunyuan_checkpoint(layout, dtype, max_shard_size) -> tiny HunyuanOCR folder, built once per session
    (tests/helpers/tiny_hunyuan.py)."""
    built = {}

    def get(layout="transformers", dtype="float32", max_shard_size=None):
        key = (layout, dtype, max_shard_size)
        if key not in built:
            from tests.helpers.tiny_hunyuan import make_tiny_checkpoint

            out = tmp_path_factory.mktemp(f"hunyuan_{layout}_{dtype}")
            built[key] = make_tiny_checkpoint(str(out), layout=layout, dtype=dtype, max_shard_size=max_shard_size)
        return built[key]

    return get
