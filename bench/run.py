"""What every benchmark script shares around its measurements: the cached random real-config checkpoints, the
options every model benchmark takes (ms_ocr's precision options passed on to every ms_ocr process it starts), and
running a worker in its own process for its JSON figures."""

import argparse
import json
import os
import subprocess
import sys

from ms_ocr.plan import KV_CACHE_DTYPES, QUANTIZE as QUANT_MODES  # tuples, no framework

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ensure_checkpoint(model, folder=None):
    """`folder` (default ~/.cache/ms_ocr/bench/<model>_random), with a random real-config checkpoint of `model`
    built into it first if it has none."""
    folder = folder or os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr", "bench",
                                    model.replace("-", "_") + "_random")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        print(f"building random real-config {model} checkpoint in {folder} ...", flush=True)
        build_checkpoint(model, folder)
    return folder


def add_run_args(p, region=None):
    """The options every model benchmark shares: --model, --ckpt, --threads, --dtype (ms_ocr's), --out, and with
    `region` (width, height) --width / --height of the text regions it reads."""
    p.add_argument("--model", default="paddleocr-vl")
    p.add_argument("--ckpt", default=None, help="checkpoint folder (default: a cached random real-config one)")
    if region:
        p.add_argument("--width", type=int, default=region[0])
        p.add_argument("--height", type=int, default=region[1])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", choices=["auto", "fp32", "bf16"], default="auto",
                   help="ms_ocr's --dtype: auto keeps a bf16 checkpoint's text weights in bf16 on the CPU, as users "
                        "run it (docs/precision.md); fp32 widens every weight at load (transformers always runs "
                        "fp32)")
    p.add_argument("--quantize", choices=QUANT_MODES, default="none", help="ms_ocr's --quantize")
    p.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto", help="ms_ocr's --kv-cache-dtype")
    p.add_argument("--out", default=os.path.join(REPO, "bench_out"))


def precision_argv(args):
    """ms_ocr's precision options as add_run_args parsed them, for a worker's or ms_ocr's command line."""
    return ["--dtype", args.dtype, "--quantize", args.quantize, "--kv-cache-dtype", args.kv_cache_dtype]


def parse_worker_args(p, worker, hidden=()):
    """Parse a two-process benchmark's command line, with --worker and the `hidden` options the main process passes
    its workers (not in --help): as its --worker, run `worker(args)`, print its JSON figures and exit; as the main
    process, return the arguments."""
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for option in hidden:
        p.add_argument(option, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args)), flush=True)
        raise SystemExit(0)
    return args


def parse_main_args(p, worker):
    """parse_worker_args, then --ckpt resolved (ensure_checkpoint) in the main process."""
    args = parse_worker_args(p, worker)
    args.ckpt = ensure_checkpoint(args.model, args.ckpt)
    return args


def run_json_worker(script, argv, threads, name):
    """Run `script argv` in its own process (OMP threads set, the repo and scripts/ importable); its last JSON
    line of stdout, or exit with the worker's stderr."""
    cmd = [sys.executable, os.path.abspath(script)] + [str(a) for a in argv]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=REPO + os.pathsep + os.path.join(REPO, "scripts"))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{name} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def build_checkpoint(model, out_dir):
    """Random weights at the real config, saved as the hub ships them (bf16), with a small tokenizer (bench/real_size.py
    BUILDERS); built in a subprocess so this process does not keep the builder's memory while the workers run."""
    code = f"from bench.real_size import BUILDERS; BUILDERS[{model!r}]({out_dir!r})"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
