"""Batch throughput of the offline engine: the same pages at --max-batch-size 1, 2, 4 (each in its own
subprocess), real model config with random weights, every page forced to the same number of new tokens.

    python scripts/benchmark_batch.py --model paddleocr-vl --pages 8 --new-tokens 64 --batch-sizes 1 2 4

Pages are text regions (--width x --height, default 448x224: the size of a paragraph crop the document pipeline
sends), so the run measures what batching changes — decode — without minutes of vision per page. Reports pages/s
and tokens/s end to end (compile excluded) and decode tokens/s (tokens per second of decode steps).
"""

import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "scripts"))
from bench.report import print_table, write_json  # noqa: E402
from bench.pages import layout_page  # noqa: E402
from bench.commands import add_batch_args, batch_record, batch_worker_argv  # noqa: E402
from bench.run import parse_main_args, run_json_worker  # noqa: E402
os.environ.setdefault("GLOG_v", "3")


def region(width, height, seed):
    """A text region crop: rows of words over the whole crop."""
    return layout_page([("text", (2, 4, width - 2, height))], width, height, seed)


def worker(args):
    from ms_ocr.device import setup
    from ms_ocr.engine import BatchEngine, Request
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.models import get as model_spec
    from ms_ocr.proc import peak_rss_gb
    setup("cpu", args.threads)
    package = model_spec(args.model)
    pipe = package.load(args.ckpt, "CPU", args.dtype, quantize=args.quantize,
                        kv_cache_dtype=args.kv_cache_dtype)
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
    add_batch_args(p)
    args = parse_main_args(p, worker)
    rows = []
    for b in args.batch_sizes:
        print(f"batch {b} ...", flush=True)
        rows.append(run_json_worker(__file__, batch_worker_argv(args, b), args.threads, f"batch {b}"))
    base = rows[0]
    print_table([("batch", 5, "d"), ("pages/s", 10, ".3f"), ("tok/s", 9, ".2f"), ("decode tok/s", 14, ".2f"),
                 ("ms/step", 9, ".1f"), ("first tok ms", 14, ".0f"), ("compile s", 11, ".1f"), ("RSS GB", 8, ".2f"),
                 (f"tok/s vs b{base['batch']}", 16, ".2fx")],
                [(r["batch"], r["pages_per_s"], r["tokens_per_s"], r["decode_tokens_per_s"], r["decode_ms_per_step"],
                  r["avg_first_token_ms"], r["compile_s"], r["peak_rss_gb"], r["tokens_per_s"] / base["tokens_per_s"])
                 for r in rows])
    write_json(args.out, f"benchmark_batch_{args.model}.json", batch_record(args, rows))


if __name__ == "__main__":
    main()
