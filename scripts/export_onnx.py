"""Export a model's vision encoder to ONNX for one image size, and check it with onnxruntime if installed.

    python scripts/export_onnx.py --model paddleocr-vl --model-path DIR --image page.png --out vision.onnx

ONNX export in MindSpore needs static shapes: the file serves images that resize to the same patch grid. The
processor (smart_resize, patches, position taps) stays on the host; the inputs are written next to the file
(<out>.inputs.npz) in the graph's input order. DeepSeek-OCR v1/v2: the file is the graph of the image's global
view side (SAM + CLIP / query encoder + projector for one [1, 3, S, S] view; tiles of that side run through it
one per call); the newline / separator assembly stays on the host.
"""

import argparse
import os
import sys

import numpy as np

os.environ.setdefault("GLOG_v", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="paddleocr-vl, hunyuan-ocr, deepseek-ocr or deepseek-ocr2")
    p.add_argument("--model-path")
    p.add_argument("--image", required=True, help="an image of the size to export for")
    p.add_argument("--out", required=True, help="output .onnx file")
    args = p.parse_args(argv)
    from ms_ocr.config_utils import CheckpointError
    from ms_ocr.device import setup
    from ms_ocr.export import ExportError, export_vision_onnx
    from ms_ocr.models import get as model_spec
    from ms_ocr.processing.image import load_image
    from ms_ocr.weights import locate
    try:
        image = load_image(args.image)
        pipe = model_spec(args.model).load(locate(args.model, args.model_path), setup("cpu"), "fp32")
        inputs, want = export_vision_onnx(pipe, image, args.out)
    except (ExportError, CheckpointError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    np.savez(os.path.splitext(args.out)[0] + ".inputs.npz", *inputs)
    try:
        import onnxruntime as ort
    except ImportError:
        print(f"exported {args.out} (onnxruntime not installed: not checked)")
        return 0
    sess = ort.InferenceSession(args.out)
    got = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), inputs)})[0]
    print(f"exported {args.out}; onnxruntime vs MindSpore max |diff| {np.abs(got - want).max():.3e} "
          f"(output {tuple(got.shape)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
