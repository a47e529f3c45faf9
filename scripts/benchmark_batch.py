"""Batch throughput of the offline engine: the same pages at --max-batch-size 1, 2, 4 (each in its own
subprocess), real model config with random weights, every page forced to the same number of new tokens.

    python scripts/benchmark_batch.py --model paddleocr-vl --pages 8 --new-tokens 64 --batch-sizes 1 2 4

Pages are text regions (--width x --height, default 448x224: the size of a paragraph crop the document pipeline
sends), so the run measures what batching changes — decode — without minutes of vision per page. Reports pages/s
and tokens/s end to end (compile excluded) and decode tokens/s (tokens per second of decode steps).
"""

import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("GLOG_v", "3")


def region(width, height, seed):
    import numpy as np
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(seed)
    words = ["inference", "document", "layout", "table", "formula", "MindSpore", "Ascend", "page", "region", "text"]
    img = Image.new("RGB", (width, height), (252, 252, 248))
    d = ImageDraw.Draw(img)
    for y in range(8, height - 16, 20):
        d.text((8, y), " ".join(rng.choice(words, size=6)), fill=(20, 20, 20))
    return img


def worker(args):
    from ms_ocr.device import setup
    from ms_ocr.engine import BatchEngine, Request
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.models import get as model_spec
    from benchmark import peak_rss_gb
    setup("cpu", args.threads)
    package = model_spec(args.model)
    pipe = package.load(args.ckpt, "CPU", args.dtype)
    prompt = next(iter(package.tasks.values()))
    pages = [region(args.width, args.height, i) for i in range(args.pages)]
    engine = BatchEngine(pipe, SamplingConfig(max_new_tokens=args.new_tokens), args.batch,
                         max_input_length=1024, max_output_length=args.new_tokens, ignore_eos=True)
    tokens, firsts = [], []

    def on_result(req, result, error):
        if error is not None:
            raise error
        tokens.append(len(result["token_ids"]))
        firsts.append(result["timings"]["first_token_ms"])

    t0 = time.perf_counter()
    engine.run([Request(str(i), [p], prompt) for i, p in enumerate(pages)], on_result)
    wall = time.perf_counter() - t0
    compile_s = sum(engine.compile_seconds().values())
    run = wall - compile_s
    dec = engine.decode_stats
    return {"batch": args.batch, "pages": len(tokens), "tokens": sum(tokens), "wall_s": wall, "compile_s": compile_s,
            "pages_per_s": len(tokens) / run, "tokens_per_s": sum(tokens) / run,
            "decode_tokens_per_s": dec["tokens"] / dec["seconds"], "decode_steps": dec["steps"],
            "decode_ms_per_step": 1000 * dec["seconds"] / dec["steps"],
            "avg_first_token_ms": sum(firsts) / len(firsts), "peak_rss_gb": peak_rss_gb()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="paddleocr-vl")
    p.add_argument("--ckpt", default=None, help="checkpoint folder (default: the cached random real-config one)")
    p.add_argument("--pages", type=int, default=8)
    p.add_argument("--width", type=int, default=448)
    p.add_argument("--height", type=int, default=224)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", choices=["auto", "fp32", "bf16"], default="auto",
                   help="auto keeps a bf16 checkpoint's weights in bf16 on the CPU (docs/native-kernels.md); fp32 widens")
    p.add_argument("--out", default=os.path.join(REPO, "bench_out"))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    if args.ckpt is None:
        from benchmark import ensure_checkpoint
        args.ckpt = ensure_checkpoint(args.model)
    from benchmark import run_json_worker
    rows = []
    for b in args.batch_sizes:
        print(f"batch {b} ...", flush=True)
        rows.append(run_json_worker(__file__, ["--worker", "--batch", b, "--model", args.model, "--ckpt", args.ckpt,
                                               "--pages", args.pages, "--width", args.width, "--height", args.height,
                                               "--new-tokens", args.new_tokens, "--threads", args.threads,
                                               "--dtype", args.dtype],
                                    args.threads, f"batch {b}"))
    base = rows[0]
    print(f"{'batch':>5}{'pages/s':>10}{'tok/s':>9}{'decode tok/s':>14}{'ms/step':>9}{'first tok ms':>14}"
          f"{'compile s':>11}{'RSS GB':>8}{'tok/s vs b' + str(base['batch']):>16}")
    for r in rows:
        print(f"{r['batch']:>5}{r['pages_per_s']:>10.3f}{r['tokens_per_s']:>9.2f}{r['decode_tokens_per_s']:>14.2f}"
              f"{r['decode_ms_per_step']:>9.1f}{r['avg_first_token_ms']:>14.0f}{r['compile_s']:>11.1f}"
              f"{r['peak_rss_gb']:>8.2f}{r['tokens_per_s'] / base['tokens_per_s']:>15.2f}x")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"benchmark_batch_{args.model}.json")
    with open(path, "w") as f:
        json.dump({"model": args.model, "pages": args.pages, "size": [args.width, args.height],
                   "new_tokens": args.new_tokens, "threads": args.threads, "dtype": args.dtype, "rows": rows}, f,
                  indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
