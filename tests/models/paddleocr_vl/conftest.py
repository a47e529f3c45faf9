import numpy as np
import pytest
import mindspore as ms

from ms_ocr import ops as K


@pytest.fixture(scope="session")
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    K.configure("CPU")


@pytest.fixture(scope="session")
def reference(tiny_dir):
    import torch
    from transformers import PaddleOCRVLForConditionalGeneration
    torch.manual_seed(0)
    return PaddleOCRVLForConditionalGeneration.from_pretrained(tiny_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def pipeline(tiny_dir, graph_mode):
    from ms_ocr.models import paddleocr_vl
    from ms_ocr.runtime import Buckets
    return paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64))


def rel_err(got, want):
    """max |got - want| / max |want| — the parity measure (tolerance 1e-4 at fp32)."""
    return float(np.abs(np.asarray(got) - np.asarray(want)).max() / np.abs(np.asarray(want)).max())
