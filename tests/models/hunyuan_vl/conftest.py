import pytest


@pytest.fixture(scope="session")
def hy_dir(hunyuan_checkpoint):
    return hunyuan_checkpoint()


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
