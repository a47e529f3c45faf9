import pytest

from tests.helpers.parity import rel_err  # noqa: F401  (re-exported for the test modules)


@pytest.fixture(scope="session")
def reference(tiny_dir):
    import torch
    from transformers import PaddleOCRVLForConditionalGeneration
    torch.manual_seed(0)
    return PaddleOCRVLForConditionalGeneration.from_pretrained(tiny_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def pipeline(tiny_dir, graph_mode):
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from ms_ocr.runtime import Buckets
    return paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64))

