"""Reference precision dump with transformers (test-only dependency): greedy generation of one image with the
raw logits of every step, in the batch runner's dump format (logits.npy [steps, V], token_ids.npy).

    python scripts/dump_reference.py --model paddleocr-vl --model-path DIR --image page.png --task ocr \
        --max-new-tokens 64 --out ref_dump/<key>
    python scripts/compare_dumps.py OUT/dumps/<key> ref_dump/<key>
"""

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, choices=["paddleocr-vl", "hunyuan-ocr", "deepseek-ocr2"])
    p.add_argument("--model-path", required=True)
    p.add_argument("--image", required=True)
    p.add_argument("--task", default="ocr")
    p.add_argument("--prompt")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    import torch

    from ms_ocr.models import get as model_spec
    from ms_ocr.processing.image import load_image
    from bench.references import reference_model_and_inputs
    prompt = args.prompt or model_spec(args.model).tasks[args.task]
    model, inputs = reference_model_and_inputs(args.model, args.model_path, load_image(args.image), prompt)
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=False, output_logits=True,
                             return_dict_in_generate=True)
    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, "logits.npy"), torch.cat(out.logits).float().numpy())
    np.save(os.path.join(args.out, "token_ids.npy"), out.sequences[0, inputs["input_ids"].shape[1]:].numpy())
    return 0


if __name__ == "__main__":
    sys.exit(main())
