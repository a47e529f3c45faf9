"""The layout stage alone: PP-DocLayoutV2/V3/V4 at their real configs (random weights, built once under
~/.cache/ms_ocr/bench) on an 800x800 page, each version and mode in its own process: load s, first call s (with
its compiling), s per page after it, peak RSS.

    python scripts/benchmark_layout.py [--versions v3 v4] [--modes graph staged eager] [--pages 3] [--threads 2]
"""

import argparse
import json
import os
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("GLOG_v", "3")
BLOCKS = 25  # detections per page kept for the post-processing's share of the time


def worker(args):
    from PIL import Image
    from ms_ocr.device import setup
    from ms_ocr.layout import LayoutDetector
    from ms_ocr.proc import peak_rss_gb, rss_gb
    from bench.pages import ARTICLE_BLOCKS, layout_page
    setup("cpu", args.threads)
    page = layout_page(ARTICLE_BLOCKS, 768, 1024).resize((800, 800), Image.BICUBIC)
    t0 = time.perf_counter()
    det = LayoutDetector(args.ckpt, mode=args.mode)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    outputs = det.analyze(page).outputs
    first_s = time.perf_counter() - t0
    # random weights score every box alike: a threshold that keeps BLOCKS pairs, about a page's worth
    scores = np.sort(1 / (1 + np.exp(-outputs[0].astype(np.float64).ravel())))
    det.threshold = float(scores[-BLOCKS])
    times = []
    for _ in range(args.pages):
        t0 = time.perf_counter()
        det.detect(page)
        times.append(time.perf_counter() - t0)
    blocks = len(det.detect(page))
    return {"version": args.version, "mode": args.mode, "blocks": blocks, "load_s": round(load_s, 2), "first_call_s": round(first_s, 2),
            "compile_s": round(det.compile_seconds, 2), "s_per_page": round(min(times), 2),
            "s_per_page_mean": round(sum(times) / len(times), 2), "rss_gb": rss_gb(), "peak_rss_gb": peak_rss_gb()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench = os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr", "bench")
    p.add_argument("--versions", nargs="+", default=["v3", "v4"], choices=["v2", "v3", "v4"])
    p.add_argument("--modes", nargs="+", default=["graph", "eager"])
    p.add_argument("--pages", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bench-dir", default=bench)
    from bench.run import parse_worker_args
    args = parse_worker_args(p, worker, ('--version', '--mode', '--ckpt'))
    from bench.run import build_checkpoint, run_json_worker
    rows = []
    for version in args.versions:
        ckpt = os.path.join(args.bench_dir, f"pp_doclayout_{version}_random")
        if not os.path.isfile(os.path.join(ckpt, "config.json")):
            build_checkpoint(f"pp-doclayout-{version}", ckpt)
        for mode in args.modes:
            rows.append(run_json_worker(__file__, ["--worker", "--version", version, "--mode", mode, "--ckpt", ckpt,
                                                   "--pages", args.pages, "--threads", args.threads],
                                        args.threads, f"{version}/{mode}"))
            print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main()
