"""Full-size HunyuanOCR (real config, random weights): logits parity with transformers. Slow: -m slow."""

import os

import numpy as np
import pytest
import torch

from tests.helpers.parity import rel_err

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def full_dir():
    from tests.helpers.real_size import make_hunyuan_ocr
    path = os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr", "bench", "hunyuan_ocr_random")
    if not os.path.isfile(os.path.join(path, "config.json")):
        make_hunyuan_ocr(path)
    return path


def test_real_config_logits_match_transformers(full_dir, graph_mode):
    from tests.helpers.pages import document_page
    from transformers import HunYuanVLForConditionalGeneration
    from ms_ocr.models.hunyuan_vl import SPEC as hunyuan_vl
    from tests.helpers.tiny_hunyuan import reference_inputs, reference_processor

    img = document_page(384, 512).convert("RGB")  # 3:4 page, small enough for a few minutes on 2 cores
    prompt = hunyuan_vl.tasks["spotting"]
    pipe = hunyuan_vl.load(full_dir, "CPU", "fp32")
    prep, _ = pipe.prepare([img], prompt)
    ref = HunYuanVLForConditionalGeneration.from_pretrained(full_dir, dtype=torch.float32).eval()
    inputs = reference_inputs(reference_processor(full_dir), [img], prompt)
    assert np.array_equal(inputs["input_ids"][0].numpy(), prep.input_ids)
    with torch.no_grad():
        want = ref(**inputs).logits[0].numpy()
    got = pipe.runtime.full_logits(prep, pipe.encode_images(prep))
    assert rel_err(got, want) < 1e-4
    assert np.array_equal(got.argmax(-1), want.argmax(-1))
