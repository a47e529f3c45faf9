"""python -m ms_ocr.export --model paddleocr-vl --model-path DIR --out EXPORT_DIR [--slots 4096]  (or ms-ocr-export)

Exports a model's vision encoder and its text graph (prefill + decode over an in-place KV cache) to MindIR; serve
the folder with `python -m ms_ocr.infer --mindir EXPORT_DIR --image page.png`. See ms_ocr/export/mindir.py for
the graphs' inputs and why prefill and decode are one graph.
"""

import os
import sys
import time

os.environ.setdefault("GLOG_v", "3")  # before MindSpore is imported, as the other command lines

from ms_ocr import models  # noqa: E402 - the registry: plain data, no framework import
from ms_ocr.cli import Parser, cli_main, model_spec  # noqa: E402


def build_parser():
    p = Parser(prog="python -m ms_ocr.export", description="Export a model to MindIR (vision and text graphs).")
    p.add_argument("--model", required=True, help=", ".join(models.names()))
    p.add_argument("--model-path", help="checkpoint folder (default: the model's default place)")
    p.add_argument("--out", required=True, help="export folder")
    p.add_argument("--slots", type=int, default=4096, help="KV cache positions per sequence (prompt + new tokens)")
    p.add_argument("--batch", type=int, default=1, help="sequences in the exported cache")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "ascend"])
    p.add_argument("--mode", choices=models.modes(), help=models.modes_help() + ": the view sizes exported")
    return p


def run(argv):
    args = build_parser().parse_args(argv)
    spec = model_spec(args)
    from ms_ocr.device import setup
    from ms_ocr.export import export_pipeline
    from ms_ocr.weights import locate
    pipe = spec.load(locate(args.model, args.model_path), setup(args.device), "fp32")
    if args.mode:
        pipe.processor.set_mode(args.mode)
    t0 = time.perf_counter()
    timings = export_pipeline(pipe, args.out, args.slots, args.batch)
    print(f"exported {args.model} to {args.out} in {time.perf_counter() - t0:.1f} s "
          f"(vision {timings['vision_s']:.1f} s, text {timings['text_s']:.1f} s)")
    return 0


def main(argv=None):
    """One `error:` line for a wrong option, a missing checkpoint or an export that cannot be made (exit 2)."""
    return cli_main(run, argv, usage_errors=(ValueError, FileNotFoundError))


if __name__ == "__main__":
    sys.exit(main())
