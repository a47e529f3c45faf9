"""The document pipeline at real configs (random weights): PP-DocLayoutV2 at 800x800 and PaddleOCR-VL 0.9B on a
768x1024 page with a fixed set of injected layout boxes (random weights detect arbitrary boxes) and a fixed
number of new tokens per region. ms_ocr and the transformers reference each run in their own subprocess with the
same page, boxes and thread count; times per stage: layout, crops, recognition per region kind.

    python scripts/benchmark_pipeline.py [--new-tokens 32] [--threads 2] [--skip-reference]

ms_ocr recognises each kind's regions as one batch (continuous batching); the reference runs its layout model
once and generates region by region (transformers has no batched PaddleOCR-VL region path), greedy, with EOS
ignored so both produce exactly --new-tokens per region. Compile time is reported apart.
"""

import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from tests.helpers.bench_report import write_json  # noqa: E402
from tests.helpers.pages import ARTICLE_BLOCKS, layout_page  # noqa: E402
os.environ.setdefault("GLOG_v", "3")

W, H = 768, 1024
BOXES = ARTICLE_BLOCKS


def page():
    return layout_page(BOXES, W, H)


def layout_blocks():
    from ms_ocr.models.pp_doclayout_v2 import LayoutBlock
    return [LayoutBlock(label, 0, 0.9, tuple(float(v) for v in box), i) for i, (label, box) in enumerate(BOXES)]


def worker_ms_ocr(args):
    from ms_ocr.proc import peak_rss_gb
    from ms_ocr.device import setup
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from ms_ocr.models.pp_doclayout_v2 import LayoutDetector
    from ms_ocr.pipeline import DocumentPipeline
    setup("cpu", args.threads)
    img = page()
    t0 = time.perf_counter()
    layout = LayoutDetector(args.layout_ckpt, mode=args.layout_mode)
    vlm = paddleocr_vl.load(args.ckpt, "CPU", "fp32")
    load_s = time.perf_counter() - t0
    doc = DocumentPipeline(layout, vlm, paddleocr_vl, SamplingConfig(max_new_tokens=args.new_tokens),
                           max_batch_size=args.max_batch_size, ignore_eos=True)
    doc.detect(img)  # compiles the layout graph (eager: a first page, timed again below)
    t0 = time.perf_counter()
    detected = doc.detect(img)
    layout_ms = 1000 * (time.perf_counter() - t0)
    result = doc.parse(img, layout_blocks=layout_blocks())
    out = {"framework": "ms_ocr", "load_s": load_s, "layout_ms": layout_ms, "layout_boxes": len(detected),
           "layout_compile_s": layout.compile_seconds, "peak_rss_gb": peak_rss_gb()}
    out.update(result.timings)
    return out


def worker_transformers(args):
    import torch
    from benchmark import reference_model_and_inputs
    from ms_ocr.proc import peak_rss_gb
    from transformers import PPDocLayoutV2ForObjectDetection
    from ms_ocr.pipeline import layout_filter, regions
    from tests.helpers.layout_reference import reference_pixels
    torch.set_num_threads(args.threads)
    img = page()
    t0 = time.perf_counter()
    layout = PPDocLayoutV2ForObjectDetection.from_pretrained(args.layout_ckpt).eval()
    load_s = time.perf_counter() - t0
    out = {"framework": "transformers"}
    with torch.inference_mode():
        pixels = torch.tensor(reference_pixels(img, 800, 800))
        layout(pixels)  # warm-up
        t0 = time.perf_counter()
        layout(pixels)
        out["layout_ms"] = 1000 * (time.perf_counter() - t0)
        blocks = layout_filter.filter_blocks(layout_blocks(), W, H)
        t0 = time.perf_counter()
        crops = []
        for b in blocks:
            task = regions.region_task(b.label)
            region = regions.crop(img, b.box)
            if task is not None:
                crops.append((task, regions.trim_to_ink(region) if task == "formula" else region))
        out["crops_ms"] = 1000 * (time.perf_counter() - t0)
        prompts = {"text": "OCR:", "table": "Table Recognition:", "formula": "Formula Recognition:"}
        t0 = time.perf_counter()
        model, _ = reference_model_and_inputs("paddleocr-vl", args.ckpt, crops[0][1], prompts[crops[0][0]])
        load_s += time.perf_counter() - t0
        out["regions"] = {}
        for task, region in crops:
            t0 = time.perf_counter()  # the processor's time counts, as ms_ocr's does
            inputs = _inputs(args.ckpt, region, prompts[task])
            model.generate(**inputs, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                           do_sample=False)
            key = f"recognize_{task}_ms"
            out[key] = out.get(key, 0.0) + 1000 * (time.perf_counter() - t0)
            out["regions"][task] = out["regions"].get(task, 0) + 1
    out.update(load_s=load_s, peak_rss_gb=peak_rss_gb())
    return out


def _inputs(ckpt, region, prompt):
    from ms_ocr.models.paddleocr_vl import SPEC
    from tests.helpers.reference import reference_inputs, reference_processor
    return reference_inputs(reference_processor(ckpt, SPEC.config_from_dir(ckpt)), [region], prompt)


def run_worker(framework, args):
    from benchmark import run_json_worker
    return run_json_worker(__file__, ["--worker", framework, "--ckpt", args.ckpt, "--layout-ckpt", args.layout_ckpt,
                                      "--new-tokens", args.new_tokens, "--threads", args.threads,
                                      "--max-batch-size", args.max_batch_size, "--layout-mode", args.layout_mode],
                             args.threads, framework)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench = os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr", "bench")
    p.add_argument("--ckpt", default=os.path.join(bench, "paddleocr_vl_random"))
    p.add_argument("--layout-ckpt", default=os.path.join(bench, "pp_doclayout_v2_random"))
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--max-batch-size", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layout-mode", default="graph", choices=["graph", "eager"],
                   help="ms_ocr's layout model (the command line's auto takes eager for fewer than 5 CPU pages)")
    p.add_argument("--skip-reference", action="store_true")
    p.add_argument("--out", default=os.path.join(REPO, "bench_out"))
    p.add_argument("--worker", choices=["ms_ocr", "transformers"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        fn = worker_ms_ocr if args.worker == "ms_ocr" else worker_transformers
        print(json.dumps(fn(args)))
        return
    from benchmark import ensure_checkpoint
    ensure_checkpoint("paddleocr-vl", args.ckpt)
    ensure_checkpoint("pp-doclayout-v2", args.layout_ckpt)
    results = {}
    for fw in ["ms_ocr"] + ([] if args.skip_reference else ["transformers"]):
        print(f"{fw} ...", flush=True)
        results[fw] = run_worker(fw, args)
    ms, tf = results["ms_ocr"], results.get("transformers", {})
    kinds = [k for k in ("text", "table", "formula", "chart") if f"recognize_{k}_ms" in ms]
    rows = [("layout (800x800) ms", "layout_ms"), ("crops ms", "crops_ms")] + \
        [(f"recognize {k} x{ms['regions'][k]} ms", f"recognize_{k}_ms") for k in kinds]
    print(f"{'stage':<26}{'ms_ocr':>12}{'transformers':>14}{'ms/tf':>8}")
    total_ms = total_tf = 0.0
    for label, key in rows:
        a, b = ms.get(key), tf.get(key)
        total_ms += a or 0.0
        total_tf += b or 0.0
        print(f"{label:<26}{a:>12.1f}{(f'{b:.1f}' if b else '-'):>14}{(f'{a / b:8.2f}' if a and b else ''):>8}")
    print(f"{'page total ms':<26}{total_ms:>12.1f}{(f'{total_tf:.1f}' if tf else '-'):>14}"
          f"{(f'{total_ms / total_tf:8.2f}' if tf else ''):>8}")
    print(f"new tokens per region {args.new_tokens}; ms_ocr compile s {ms['compile_s'] + ms['layout_compile_s']:.1f}; "
          f"peak RSS GB ms_ocr {ms['peak_rss_gb']:.2f}" + (f", transformers {tf['peak_rss_gb']:.2f}" if tf else ""))
    write_json(args.out, "benchmark_pipeline.json", {"page": [W, H], "boxes": BOXES, "new_tokens": args.new_tokens,
                                                     "threads": args.threads, "results": results})


if __name__ == "__main__":
    main()
