import pytest


@pytest.fixture(scope="session")
def hy_dir(hunyuan_checkpoint):
    return hunyuan_checkpoint()


@pytest.fixture(scope="session")
def hy15_dir(hunyuan_checkpoint, tmp_path_factory):
    """The tiny checkpoint with HunyuanOCR-1.5's published config differences (tests/matrix/layouts.set_version:
    the text fields also at the root, vision_config.max_vit_seq_len 65,536)."""
    import shutil

    from tests.matrix.layouts import set_version
    folder = str(tmp_path_factory.mktemp("hunyuan_v1_5") / "ckpt")
    shutil.copytree(hunyuan_checkpoint(), folder)
    set_version(folder, "hunyuan-1.5")
    return folder


@pytest.fixture(scope="session")
def hy_reference(hy_dir):
    import torch
    from transformers import HunYuanVLForConditionalGeneration
    return HunYuanVLForConditionalGeneration.from_pretrained(hy_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def hy_pipeline(hy_dir, graph_mode):
    from ms_ocr.models.hunyuan_vl import SPEC as hunyuan_vl
    from ms_ocr.runtime import Buckets
    return hunyuan_vl.load(hy_dir, "CPU", "auto", Buckets(prefill=32, slots=64))


@pytest.fixture(scope="session")
def page(tmp_path_factory):
    """A small document-like page, 3:4 (bench.pages.text_page)."""
    from bench.pages import text_page
    path = tmp_path_factory.mktemp("hy_pages") / "page.png"
    text_page(120, 160, "text").save(path)
    return str(path)
