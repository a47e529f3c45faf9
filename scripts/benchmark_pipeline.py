"""The document pipeline per PaddleOCR-VL version on a 10-page PDF: 1.0 (PP-DocLayoutV2), 1.6 (V3) and 1.8 (V4) at
their real configs (every tensor random, so scores spread over the queries as a trained model's do) with PaddleOCR-VL
0.9B (random weights, bf16 as the hub ships it) reading the regions, each run in its own process. In order: the
layout models through ONNX Runtime on the same pages (scripts/benchmark_layout_onnx.py, the peer); per version one
process on the first page alone (the article's regions) and one `python -m ms_ocr.pipeline --image` process on it
(the regions the random layout model finds; peak RSS as the kernel counts it, wait4); the 10-page runs. The JSON is
written after every process.

    python scripts/benchmark_pipeline.py [--versions 1.0 1.6 1.8] [--pages 10] [--new-tokens 32] [--threads 2]

A page of the 10-page run: rendered from the PDF (96 dpi, 768x1024), the layout model on it (--layout-mode auto, as
the command line: eager for 10 pages; one threshold keeping 25 detections, since random weights score every
label alike), then the page's drawn blocks (bench/pages.py ARTICLE_BLOCKS; V3 outlines and V4
quadrilaterals of their boxes) through the version's rules and the recogniser, --new-tokens per region with EOS
ignored: every version reads the same regions with the same token budget. Figures: layout s/page (forward and
post-processing, compiling apart) and its forward alone, compile s (layout, recogniser), recognition s/page
(compiling apart), pages/hour over the run (compiling included, loading not), peak RSS.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "scripts"))
os.environ.setdefault("GLOG_v", "3")
LAYOUT = {"1.0": "v2", "1.5": "v3", "1.6": "v3", "1.8": "v4"}
DETECTIONS = 25  # per page, the layout post-processing's share (as scripts/benchmark_layout.py)
DPI = 96  # bench/pages.py article_pdf: 768x1024 pages


def fixed_blocks(version):
    """ARTICLE_BLOCKS as the version's layout model gives blocks: V3 a polygon, V4 a quadrilateral (their boxes)."""
    from ms_ocr.layout import LayoutBlock
    from bench.layout import LABELS
    from bench.pages import ARTICLE_BLOCKS
    out = []
    for i, (label, (x1, y1, x2, y2)) in enumerate(ARTICLE_BLOCKS):
        corners = ((x1, y1), (x2, y1), (x2, y2), (x1, y2))
        points = None if LAYOUT[version] == "v2" else tuple((float(x), float(y)) for x, y in corners)
        out.append(LayoutBlock(label, LABELS.index(label), 1.0, (float(x1), float(y1), float(x2), float(y2)), i,
                               points))  # score 1: above any threshold the run sets
    return out


def worker(args):
    from ms_ocr.batch.inputs import render_pdf_page
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.layout.processor import preprocess
    from ms_ocr.layout.runner import layout_mode_for
    from ms_ocr.pipeline import DocumentPipeline
    from ms_ocr.proc import peak_rss_gb
    t0 = time.perf_counter()
    doc = DocumentPipeline.load("paddleocr-vl", args.ckpt, args.layout_ckpt, "cpu", args.dtype, args.threads,
                                sampling=SamplingConfig(max_new_tokens=args.new_tokens),
                                layout_mode=layout_mode_for("auto", "CPU", args.pages), version=args.version,
                                ignore_eos=True)
    row = {"version": args.version, "layout_mode": doc.layout.mode, "load_s": round(time.perf_counter() - t0, 2)}
    det, blocks = doc.layout, fixed_blocks(args.version)
    wall = time.perf_counter()
    first = render_pdf_page(args.pdf, 1, DPI)
    t0 = time.perf_counter()
    logits = det.raw(preprocess(first, det.pcfg))[0]  # the first call compiles (graph)
    row["layout_first_call_s"] = round(time.perf_counter() - t0, 2)
    det.pop_compile_seconds()  # reported apart (layout_compile_s)
    scores = np.sort(1 / (1 + np.exp(-logits.astype(np.float64).ravel())))
    row["layout_threshold"] = float(scores[-DETECTIONS] - 1e-6)
    doc.set_threshold(row["layout_threshold"])
    layout, forward, recognition, tokens, regions = [], [], [], 0, 0
    for p in range(1, args.pages + 1):
        page = first if p == 1 else render_pdf_page(args.pdf, p, DPI)
        t0 = time.perf_counter()
        found = doc.analyze(page)
        layout.append(time.perf_counter() - t0 - det.pop_compile_seconds())
        result = doc.parse(page, layout_blocks=blocks, warp=found.warp)
        t = result.timings
        recognition.append(sum(v for k, v in t.items() if k.startswith("recognize_")) / 1000)
        tokens += sum(v for k, v in t.items() if k.endswith("_tokens"))
        regions += sum(t["regions"].values())
        row.setdefault("detections", len(found.blocks))
    wall = time.perf_counter() - wall
    for page in (first, render_pdf_page(args.pdf, min(2, args.pages), DPI)):  # the forward alone, as ONNX Runtime
        pixels = preprocess(page, det.pcfg)
        t0 = time.perf_counter()
        det.raw(pixels)
        forward.append(time.perf_counter() - t0)
    vlm_compile = sum(doc.vlm.runtime.compiler.seconds.values())
    row.update(pages=args.pages, layout_s_per_page=round(float(np.mean(layout)), 3),
               layout_forward_s=round(min(forward), 3), layout_compile_s=round(det.compile_seconds, 2),
               recognizer_compile_s=round(vlm_compile, 2), recognition_s_per_page=round(float(np.mean(recognition)), 2),
               regions_per_page=regions / args.pages, tokens_per_page=tokens / args.pages, run_s=round(wall, 1),
               pages_per_hour=round(3600 * args.pages / wall, 1), peak_rss_gb=peak_rss_gb())
    return row


def one_page_process(args, version, layout_ckpt, threshold, folder):
    """`python -m ms_ocr.pipeline --image page1.png` as a user runs it (layout mode auto: eager for one page), at
    the threshold that keeps 25 detections on the page: wall s, peak RSS (the child's ru_maxrss), the timings."""
    from ms_ocr.batch.inputs import render_pdf_page
    image, out = os.path.join(folder, "page1.png"), os.path.join(folder, f"out_{version}")
    render_pdf_page(args.pdf, 1, DPI).save(image)
    cmd = [sys.executable, "-m", "ms_ocr.pipeline", "--image", image, "--out", out, "--model-path", args.ckpt,
           "--layout-model-path", layout_ckpt, "--layout-threshold", repr(threshold), "--max-new-tokens",
           str(args.new_tokens), "--threads", str(args.threads), "--device", "cpu", "--dtype", args.dtype]
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS=str(args.threads))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(os.path.join(folder, f"{version}.log"), "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    row = {"version": version, "wall_s": round(time.perf_counter() - t0, 1), "exit": proc.returncode,
           "peak_rss_gb": round(usage.ru_maxrss / 2 ** 20, 3), "load_average_before": round(load, 2)}
    if proc.returncode == 0:
        with open(os.path.join(out, "page1.json")) as f:
            t = json.load(f)["timings"]
        row.update(layout_s=round(t["layout_ms"] / 1000, 2), regions=sum(t["regions"].values()),
                   recognizer_compile_s=t["compile_s"], total_s=round(t["total_ms"] / 1000, 1))
    return row


def report(rows, single, cli, peer):
    from bench.report import print_table
    print_table([("version", 8, "<"), ("layout s/page", 14, ".2f"), ("forward s", 10, ".2f"),
                 ("compile s layout, VLM", 23, ">"), ("recognition s/page", 19, ".1f"), ("pages/hour", 11, ".1f"),
                 ("peak RSS GB", 12, ".2f"), ("1 page: RSS GB", 15, ".2f"), ("CLI RSS GB", 11, ".2f")],
                [(r["version"], r["layout_s_per_page"], r["layout_forward_s"],
                  f"{r['layout_compile_s']:.1f}, {r['recognizer_compile_s']:.1f}", r["recognition_s_per_page"],
                  r["pages_per_hour"], r["peak_rss_gb"], single.get(r["version"], {}).get("peak_rss_gb"),
                  cli.get(r["version"], {}).get("peak_rss_gb")) for r in rows])
    for p in peer:
        print(f"onnxruntime PP-DocLayout{p['version'].upper()}: " + (p["error"] if "error" in p else
              f"{p['s_per_page']:.2f} s/page forward (export {p['export_s']} s, peak RSS {p['peak_rss_gb']} GB)"))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench = os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr", "bench")
    p.add_argument("--versions", nargs="+", default=["1.0", "1.6", "1.8"], choices=list(LAYOUT))
    p.add_argument("--pages", type=int, default=10)
    p.add_argument("--new-tokens", type=int, default=32, help="per region, EOS ignored")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="auto", help="the recogniser's --dtype (auto: bf16 weights kept in bf16)")
    p.add_argument("--ckpt", default=os.path.join(bench, "paddleocr_vl_random"))
    p.add_argument("--bench-dir", default=bench, help="layout checkpoints pp_doclayout_vN_scored and the PDF")
    p.add_argument("--skip-peer", action="store_true", help="no ONNX Runtime rows")
    p.add_argument("--json", default=os.path.join(REPO, "bench_out", "benchmark_pipeline.json"))
    from bench.run import parse_worker_args
    args = parse_worker_args(p, worker, ('--version', '--layout-ckpt', '--pdf'))
    from bench.pages import article_pdf
    from bench.report import write_json
    from bench.run import ensure_checkpoint, run_json_worker
    from benchmark_layout_onnx import run as run_peer
    from ms_ocr.ops.native import cpu_model
    ensure_checkpoint("paddleocr-vl", args.ckpt)
    layouts = {v: ensure_checkpoint(f"pp-doclayout-{LAYOUT[v]}-scored",
                                    os.path.join(args.bench_dir, f"pp_doclayout_{LAYOUT[v]}_scored"))
               for v in args.versions}
    args.pdf = article_pdf(os.path.join(args.bench_dir, f"article_{args.pages}_pages.pdf"), args.pages)
    result = {"meta": {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": args.threads, "date": time.strftime(
        "%Y-%m-%d %H:%M UTC", time.gmtime()), "pages": args.pages, "new_tokens": args.new_tokens, "dtype": args.dtype,
        "load_average_start": [round(x, 2) for x in os.getloadavg()]}, "onnxruntime": [], "one_page": {},
        "one_page_cli": {}, "runs": []}

    def save():  # after every process: a long run that stops keeps what it measured
        result["meta"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        write_json(os.path.dirname(args.json), os.path.basename(args.json), result)

    def run(version, pages):
        load = round(os.getloadavg()[0], 2)
        try:
            row = run_json_worker(__file__, ["--worker", "--version", version, "--ckpt", args.ckpt, "--layout-ckpt",
                                             layouts[version], "--pdf", args.pdf, "--pages", pages, "--new-tokens",
                                             args.new_tokens, "--threads", args.threads, "--dtype", args.dtype],
                                  args.threads, version)
        except SystemExit as e:  # the worker failed: its row says how, the other runs go on
            row = {"version": version, "pages": pages, "error": str(e)[-2000:]}
        print(json.dumps(dict(row, load_average_before=load)), flush=True)
        return dict(row, load_average_before=load)

    # the short runs first: the layout peer, then one page per version (the article page alone, the command line)
    if not args.skip_peer:
        result["onnxruntime"] = run_peer(sorted({LAYOUT[v] for v in args.versions} - {"v2"}), args.pdf,
                                         args.bench_dir, args.threads)
        print("\n".join(json.dumps(row) for row in result["onnxruntime"]), flush=True)
        save()
    with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as folder:
        for version in args.versions:
            single = result["one_page"][version] = run(version, 1)
            if "error" in single:
                continue
            result["one_page_cli"][version] = one_page_process(args, version, layouts[version],
                                                               single["layout_threshold"], folder)
            print(json.dumps(result["one_page_cli"][version]), flush=True)
            save()
    for version in args.versions:
        result["runs"].append(run(version, args.pages))
        save()
    report([r for r in result["runs"] if "error" not in r], result["one_page"], result["one_page_cli"],
           result["onnxruntime"])


if __name__ == "__main__":
    main()
