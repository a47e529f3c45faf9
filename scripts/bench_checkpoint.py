"""Random-weight checkpoints at the real architecture, for benchmarks (real weights cannot be fetched here).

Saved as bf16 like the hub release, with the small test tokenizer: token ids only need to exist, the
architecture and shapes are what the timings depend on.
"""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# The released preprocessor settings of PaddlePaddle/PaddleOCR-VL.
PADDLE_MIN_PIXELS, PADDLE_MAX_PIXELS = 147384, 2822400


def make_paddleocr_vl(out_dir, seed=0):
    import torch
    from transformers import PaddleOCRVLConfig, PaddleOCRVLForConditionalGeneration, PaddleOCRVLImageProcessorPil
    from tests.helpers.tiny_paddle import SPECIAL_IDS
    from tests.helpers.tiny_tokenizer import write_tokenizer

    torch.manual_seed(seed)
    rope = {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [16, 24, 24]}
    cfg = PaddleOCRVLConfig(text_config={"rope_parameters": rope}, **SPECIAL_IDS)  # reference defaults = 0.9B
    model = PaddleOCRVLForConditionalGeneration(cfg).to(torch.bfloat16).eval()
    model.generation_config.update(eos_token_id=2, bos_token_id=1, pad_token_id=0)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    PaddleOCRVLImageProcessorPil(min_pixels=PADDLE_MIN_PIXELS, max_pixels=PADDLE_MAX_PIXELS,
                                 image_mean=[0.5] * 3, image_std=[0.5] * 3).save_pretrained(out_dir)
    write_tokenizer(out_dir, "json", "transformers", seed)
    return out_dir


BUILDERS = {"paddleocr-vl": make_paddleocr_vl}
