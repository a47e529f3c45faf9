"""Full-size PaddleOCR-VL (real config, random weights): logits parity with transformers. Slow: -m slow."""

import os

import numpy as np
import pytest
import torch

from tests.models.paddleocr_vl.conftest import rel_err

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def full_dir():
    from tests.helpers.real_size import make_paddleocr_vl
    path = os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr", "bench", "paddleocr_vl_random")
    if not os.path.isfile(os.path.join(path, "config.json")):
        make_paddleocr_vl(path)
    return path


def test_real_config_logits_match_transformers(full_dir, graph_mode):
    from tests.helpers.pages import document_page
    from transformers import PaddleOCRVLForConditionalGeneration
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from tests.helpers.reference import reference_inputs, reference_processor

    img = document_page(336, 448).convert("RGB")  # 3:4 page, small enough for a few minutes on 2 cores
    pipe = paddleocr_vl.load(full_dir, "CPU", "fp32")
    prep, out = pipe.prepare([img], "OCR:")
    ref = PaddleOCRVLForConditionalGeneration.from_pretrained(full_dir, dtype=torch.float32).eval()
    inputs = reference_inputs(reference_processor(full_dir, pipe.cfg), [img], "OCR:")
    assert np.array_equal(inputs["input_ids"][0].numpy(), prep.input_ids)
    with torch.no_grad():
        want = ref(**inputs).logits[0].numpy()
    got = pipe.runtime.full_logits(prep, pipe.encode_images(prep))
    assert rel_err(got, want) < 1e-4
    assert np.array_equal(got.argmax(-1), want.argmax(-1))
