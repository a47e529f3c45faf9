"""The command lines of the batch and serve benchmarks (scripts/benchmark_batch.py, scripts/benchmark_serve.py): their
options, the worker command lines they run (bench/run.py run_json_worker), the `python -m ms_ocr.serve` command the
serve benchmark starts and the JSON record each saves. Here so that the tests check, without importing scripts/, that
ms_ocr's precision options (run.precision_argv) reach every ms_ocr process a benchmark starts and its saved figures."""

import argparse
import sys

from bench.run import add_run_args, precision_argv

SERVE_MODES = ("infer", "batch", "serve", "llama-server")  # what benchmark_serve.py can run the requests with
REGION = (448, 224)  # the default text region: the size of a paragraph crop the document pipeline sends


# ---- scripts/benchmark_batch.py -----------------------------------------------------------------------------------
def add_batch_args(p):
    """benchmark_batch.py's options: add_run_args' (text regions of REGION) and its own."""
    add_run_args(p, region=REGION)
    p.add_argument("--pages", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)


def batch_worker_argv(args, batch):
    """The worker command line (after the script) measuring `batch` pages at a time."""
    return ["--worker", "--batch", batch, "--model", args.model, "--ckpt", args.ckpt, "--pages", args.pages,
            "--width", args.width, "--height", args.height, "--new-tokens", args.new_tokens, "--threads", args.threads,
            *precision_argv(args)]


def batch_record(args, rows):
    """What benchmark_batch.py saves: the run's settings and its rows (one per batch size)."""
    return {"model": args.model, "pages": args.pages, "size": [args.width, args.height],
            "new_tokens": args.new_tokens, "threads": args.threads, "dtype": args.dtype, "quantize": args.quantize,
            "kv_cache_dtype": args.kv_cache_dtype, "rows": rows}


# ---- scripts/benchmark_serve.py -----------------------------------------------------------------------------------
def add_serve_args(p):
    """benchmark_serve.py's options: add_run_args' (page crops of REGION) and its own."""
    add_run_args(p, region=REGION)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--new-tokens", type=int, nargs="+", default=[96],
                   help="output tokens per request; several values go to the requests in turn")
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--modes", nargs="+", choices=SERVE_MODES, default=["infer", "serve"],
                   help="what runs the requests: infer (one by one, the baseline), batch (the offline engine, "
                        "--max-num-seqs at a time), serve (python -m ms_ocr.serve at each --concurrency), "
                        "llama-server (llama.cpp's server, the peer, at each --concurrency)")
    p.add_argument("--no-infer", action="store_true", help="skip the infer one-by-one baseline")
    p.add_argument("--llamacpp-slots", type=int, default=4, help="llama-server's -np (its parallel sequences)")
    p.add_argument("--llamacpp-format", choices=["BF16", "Q8_0"], default="BF16",
                   help="llama-server's text weights (vision BF16)")
    p.add_argument("--worker-mode", choices=["infer", "batch"], default="infer", help=argparse.SUPPRESS)


def serve_infer_argv(args, mode="infer"):
    """The worker command line (after the script) of the `infer` one-request-at-a-time baseline, or with mode
    "batch" of the offline engine's run over the same requests (--max-num-seqs at a time)."""
    return ["--worker", "--worker-mode", mode, "--max-num-seqs", args.max_num_seqs, "--max-model-len",
            args.max_model_len, "--model", args.model, "--ckpt", args.ckpt, "--requests", args.requests,
            "--new-tokens", *args.new_tokens, "--width", args.width, "--height", args.height,
            "--threads", args.threads, *precision_argv(args)]


def server_command(args, port):
    """The `python -m ms_ocr.serve` command line the serve benchmark starts on `port`."""
    return [sys.executable, "-m", "ms_ocr.serve", "--model", args.model, "--model-path", args.ckpt, "--port", str(port),
            "--max-num-seqs", str(args.max_num_seqs), "--max-model-len", str(args.max_model_len), "--device", "cpu",
            *precision_argv(args), "--threads", str(args.threads), "--max-queue", str(max(64, args.requests))]


def serve_record(args, rows):
    """What benchmark_serve.py saves: the run's settings and its rows (infer, then one per concurrency)."""
    return {"model": args.model, "requests": args.requests, "size": [args.width, args.height],
            "new_tokens": args.new_tokens, "dtype": args.dtype, "quantize": args.quantize,
            "kv_cache_dtype": args.kv_cache_dtype, "threads": args.threads,
            "max_num_seqs": args.max_num_seqs, "max_model_len": args.max_model_len,
            "llamacpp": {"slots": args.llamacpp_slots, "format": args.llamacpp_format}, "rows": rows}


# ---- llama.cpp's server, the many-pages peer (scripts/bench_llamacpp.py server_command) --------------------------
def llama_server_command(bin_dir, gguf_dir, name, port, fmt="BF16", slots=4, slot_tokens=2048, threads=2,
                         template=None, no_repack=False):
    """llama-server for GGUF NAME on 127.0.0.1:PORT: `slots` parallel sequences (-np, continuous batching) of
    `slot_tokens` context each (-c is split across the slots, each rounded up to 256), greedy, no host-RAM prompt
    cache (its 8 GiB default would count in peak RSS and replay nothing: every request is a new page), no Web UI;
    `template` a Jinja chat template (None: the built-in one llama.cpp detects, as its CLI, not the GGUF's own);
    `no_repack` keeps Q8_0 off ggml's AMX kernels (they fault on the Xeon KVM guests here)."""
    import os
    cmd = [os.path.join(bin_dir, "llama-server"), "-m", os.path.join(gguf_dir, f"{name}-text-{fmt}.gguf"),
           "--mmproj", os.path.join(gguf_dir, f"{name}-mmproj-BF16.gguf"), "-np", str(slots), "-c",
           str(slots * -(-slot_tokens // 256) * 256), "-cb", "-t", str(threads), "--temp", "0", "--cache-ram", "0",
           "--no-webui", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--jinja", "--chat-template", template] if template is not None else ["--no-jinja"]
    return cmd + (["--no-repack"] if no_repack else [])

