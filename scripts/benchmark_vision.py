"""The vision tower's cost by page size: seconds (compile excluded) and resident memory of one page's encoding.

    python scripts/benchmark_vision.py --model hunyuan-ocr-1.5 --mpx 1 4 16 [--threads 2] [--out FILE.json]

Builds (once, cached) a checkpoint with the real architecture and random weights (bench/real_size.py; for
hunyuan-ocr-1.5 the 1.0 weights with 1.5's published config and 4096x4096 pixel budget), then encodes one square
page of each size (MPX * 2**20 pixels, resized by the checkpoint's own processor) in a fresh process, once, as
`infer` encodes a page. Reports the patches, the seconds of the encoding less its graphs' compile time, the resident
memory after load and the process's peak.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("GLOG_v", "3")


REGISTRY_NAME = {"hunyuan-ocr-1.5": "hunyuan-ocr"}  # builder keys that are a version of a registered model


def worker(args):
    import numpy as np
    from PIL import Image

    from ms_ocr.device import setup
    from ms_ocr.models import get
    from ms_ocr.proc import peak_rss_gb, rss_gb
    from ms_ocr.runtime import Buckets
    setup("cpu", args.threads)
    spec = get(REGISTRY_NAME.get(args.model, args.model))
    pipe = spec.load(args.ckpt, "CPU", args.dtype, Buckets())
    load_gb = rss_gb()
    mpx = args.mpx[0]
    side = int(math.sqrt(mpx * 2 ** 20))
    rng = np.random.default_rng(0)
    page = Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8))
    prep, _ = pipe.prepare([page], next(iter(pipe.spec.tasks.values())))
    patches = sum(int(np.asarray(v.embed[0]).shape[0]) for v in prep.vision_inputs)
    rt = pipe.runtime
    t0 = time.perf_counter()
    pipe.encode_images(prep).asnumpy()
    compile_s = rt.compiler.seconds.get("vision", 0.0)
    return {"mpx": mpx, "side": side, "patches": patches, "vision_s": time.perf_counter() - t0 - compile_s,
            "compile_s": compile_s, "load_rss_gb": load_gb, "peak_rss_gb": peak_rss_gb(),
            "threads": args.threads, "dtype": args.dtype, "spec_version": pipe.spec.version}


def cpu_model():
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown")


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="hunyuan-ocr-1.5", help="a bench/real_size.py BUILDERS key")
    p.add_argument("--ckpt", default=None, help="checkpoint folder (default: a cached random real-config one)")
    p.add_argument("--mpx", type=float, nargs="+", default=[1, 4, 16])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def main():
    args = build_parser().parse_args()
    if args.worker:
        print(json.dumps(worker(args)), flush=True)
        return
    from bench.run import ensure_checkpoint
    args.ckpt = ensure_checkpoint(args.model, args.ckpt)
    rows = []
    for mpx in args.mpx:
        cmd = [sys.executable, __file__, "--worker", "--model", args.model, "--ckpt", args.ckpt, "--mpx", str(mpx),
               "--threads", str(args.threads), "--dtype", args.dtype]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise SystemExit(f"worker failed at {mpx} Mpx:\n{proc.stderr[-3000:]}")
        rows.append(json.loads(lines[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print(f"CPU: {cpu_model()}, {args.threads} threads")
    print(f"{'Mpx':>5} {'pixels':>11} {'patches':>8} {'vision s':>9} {'load GB':>8} {'peak GB':>8}")
    for r in rows:
        print(f"{r['mpx']:>5g} {r['side']}x{r['side']:<6} {r['patches']:>8} {r['vision_s']:>9.1f} "
              f"{r['load_rss_gb']:>8.2f} {r['peak_rss_gb']:>8.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"cpu": cpu_model(), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
