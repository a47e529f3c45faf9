"""The transformers reference pieces the tests compare against (test-only: imports torch/transformers); the processor
and its inputs are bench/references.py's (the benchmarks use them too)."""

from bench.references import paddle_reference_inputs as reference_inputs  # noqa: F401
from bench.references import paddle_reference_processor as reference_processor


def reference_greedy(folder, cfg, images, prompt, max_new_tokens, weights_dtype=None):
    """Greedy token ids from transformers' generate (fp32 compute; weights optionally rounded to bf16)."""
    import torch
    from transformers import PaddleOCRVLForConditionalGeneration

    model = PaddleOCRVLForConditionalGeneration.from_pretrained(folder, dtype=weights_dtype or torch.float32)
    model = model.float().eval()
    inputs = reference_inputs(reference_processor(folder, cfg), images, prompt)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:].tolist()
