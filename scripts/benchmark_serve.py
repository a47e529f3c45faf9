"""Serving throughput: N requests over page crops from C concurrent OpenAI clients against `python -m ms_ocr.serve`,
compared with `infer`'s one-request-at-a-time path (VLMPipeline.run) on the same crops, real model config with
random weights, every request forced to its --new-tokens output tokens (vLLM's ignore_eos; several values are
given to the requests in turn, a mix of answer lengths as a document's regions have).

    python scripts/benchmark_serve.py --model paddleocr-vl --requests 16 --concurrency 1 8 --new-tokens 96

Many pages against llama.cpp (`--modes batch serve llama-server`): the offline engine (`python -m ms_ocr.batch`'s,
--max-num-seqs at a time), the server at each --concurrency, and llama.cpp's llama-server (`python
scripts/bench_llamacpp.py build-server`; the same checkpoint converted to GGUF, -np --llamacpp-slots) on the same
pages, e.g. 16 pages of 768x1024 with 256-token answers:

    python scripts/benchmark_serve.py --requests 16 --width 768 --height 1024 --new-tokens 256 \
        --max-model-len 1536 --max-num-seqs 4 --concurrency 8 --modes batch serve llama-server

Reports requests (pages) an hour, output tokens/s, time to first token and request latency percentiles, and the bound that
batching can reach over `infer` one by one: its total latency over its total time to first token (what the server
takes if its batched decode were free, vision and prefill costing what they cost alone). The server is warmed
up with one request of the crop size; graphs that later runs compile (prefill for new group sizes) are timed by
the server's compile counter and taken out of the wall time; the infer baseline runs one page before timing.
TTFT of the server comes from its /metrics histogram (mean, and percentiles at bucket resolution): with random
weights and the small test tokenizer most tokens decode to no text, so clients cannot see the first token.
"""

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "scripts"))
from bench.report import print_table, write_json  # noqa: E402
from bench.commands import add_serve_args, serve_infer_argv, serve_record, server_command  # noqa: E402
from bench.run import parse_main_args, run_json_worker  # noqa: E402
os.environ.setdefault("GLOG_v", "3")


def crops(n, width, height):
    from benchmark_batch import region
    return [region(width, height, i) for i in range(n)]


def data_url(img):
    import base64
    import io
    buf = io.BytesIO()
    img.save(buf, format="JPEG")
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def percentile(values, q):
    import numpy as np
    return float(np.percentile(values, q)) if values else float("nan")


# ---- infer baseline (own process) -------------------------------------------------------------------------------
def load_worker(args):
    """A worker's (pipeline, its model's first task prompt, the requests' pages): the model loaded on the CPU with
    the run's threads and precision."""
    from ms_ocr.device import setup
    from ms_ocr.models import get as model_spec
    setup("cpu", args.threads)
    package = model_spec(args.model)
    pipe = package.load(args.ckpt, "CPU", args.dtype, quantize=args.quantize, kv_cache_dtype=args.kv_cache_dtype)
    return pipe, next(iter(package.tasks.values())), crops(args.requests, args.width, args.height)


def infer_worker(args):
    from ms_ocr.proc import peak_rss_gb
    from ms_ocr.generate import SamplingConfig
    pipe, prompt, pages = load_worker(args)
    pipe.eos_ids = []  # every request runs to its budget, as the server's requests do (ignore_eos)
    pipe.run([pages[0]], prompt, SamplingConfig(max_new_tokens=2))  # compile
    lat, ttft, tokens = [], [], 0
    t0 = time.perf_counter()
    for page, n in zip(pages, budgets(args)):
        start, first = time.perf_counter(), []
        out = pipe.run([page], prompt, SamplingConfig(max_new_tokens=n),
                       on_token=lambda t: first or first.append(time.perf_counter()))
        lat.append(time.perf_counter() - start)
        ttft.append(first[0] - start)
        tokens += len(out["token_ids"])
    wall = time.perf_counter() - t0
    return {"mode": "infer", "concurrency": 1, "requests": len(pages), "tokens": tokens, "wall_s": wall,
            "latency_s": lat, "ttft_s": ttft, "peak_rss_gb": peak_rss_gb()}


def batch_worker(args):
    """The offline engine (what `python -m ms_ocr.batch` runs) over the same requests, --max-num-seqs at a time,
    each to its budget; wall time from the first request in to the last result out, compile included."""
    from ms_ocr.engine import BatchEngine, Request
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.proc import peak_rss_gb
    pipe, prompt, pages = load_worker(args)
    budget = budgets(args)
    engine = BatchEngine(pipe, SamplingConfig(max_new_tokens=max(budget)), args.max_num_seqs,
                         max_model_len=args.max_model_len, ignore_eos=True)
    lat, tokens = [], []

    def on_result(req, result, error):
        if error is not None:
            raise error
        lat.append(time.perf_counter() - t0)
        tokens.append(len(result["token_ids"]))

    t0 = time.perf_counter()
    engine.run([Request(str(i), [p], prompt, sampling=SamplingConfig(max_new_tokens=n), ignore_eos=True)
                for i, (p, n) in enumerate(zip(pages, budget))], on_result)
    wall = time.perf_counter() - t0
    compile_s = sum(engine.compile_seconds().values())
    return {"mode": "batch", "concurrency": args.max_num_seqs, "requests": len(tokens), "tokens": sum(tokens),
            "wall_s": wall - compile_s, "wall_with_compile_s": wall, "compile_s": compile_s, "latency_s": lat,
            "peak_rss_gb": peak_rss_gb()}


def worker(args):
    return batch_worker(args) if args.worker_mode == "batch" else infer_worker(args)


# ---- servers ----------------------------------------------------------------------------------------------------
def peak_rss_of(pid):
    """A live process's peak resident set (VmHWM), GB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2 ** 20
    return float("nan")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args, port, command=None):
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS=str(args.threads))
    log = open(os.path.join(args.out, f"server-{port}.log"), "w+")
    proc = subprocess.Popen(command or server_command(args, port), env=env, cwd=REPO, stdout=log,
                            stderr=subprocess.STDOUT, text=True)
    proc.log = log
    import httpx
    deadline = time.monotonic() + 1800
    while True:
        if proc.poll() is not None:
            log.seek(0)
            raise SystemExit(f"server failed:\n{log.read()[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("server did not start within 30 minutes")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(1)


def scrape_ttft(base):
    """(sum, count, [(upper bound, cumulative count)]) of the server's TTFT histogram, and its compile seconds."""
    import httpx
    text = httpx.get(base + "/metrics", timeout=30).text
    buckets, total, count, compile_s = [], 0.0, 0, 0.0
    for line in text.splitlines():
        if line.startswith("ms_ocr:compile_seconds_total{"):
            compile_s += float(line.rsplit(" ", 1)[1])
        if line.startswith("ms_ocr:time_to_first_token_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), int(float(line.rsplit(" ", 1)[1]))))
        elif line.startswith("ms_ocr:time_to_first_token_seconds_sum"):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith("ms_ocr:time_to_first_token_seconds_count"):
            count = int(float(line.rsplit(" ", 1)[1]))
    return total, count, buckets, compile_s


def bucket_percentile(before, after, q):
    """The q-th percentile's bucket upper bound between two scrapes of the histogram."""
    counts = [(le, a - b) for (le, a), (_, b) in zip(after[2], before[2])]
    n = counts[-1][1] if counts else 0
    for le, c in counts:
        if n and c >= q / 100 * n:
            return le
    return float("nan")


def budgets(args):
    """Each request's output tokens: the --new-tokens values in turn."""
    return [args.new_tokens[i % len(args.new_tokens)] for i in range(args.requests)]


async def client_run(base, model, urls, concurrency, new_tokens):
    from openai import AsyncOpenAI
    sem = asyncio.Semaphore(concurrency)
    lat, tokens = [], []
    async with AsyncOpenAI(base_url=base + "/v1", api_key="EMPTY", max_retries=0, timeout=3600) as client:
        async def one(url, n):
            async with sem:
                t0 = time.perf_counter()
                r = await client.chat.completions.create(
                    model=model, temperature=0, max_tokens=n,
                    messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                           {"type": "text", "text": "OCR:"}]}],
                    extra_body={"ignore_eos": True})
                lat.append(time.perf_counter() - t0)
                tokens.append(r.usage.completion_tokens)
        t0 = time.perf_counter()
        await asyncio.gather(*[one(u, n) for u, n in zip(urls, new_tokens)])
        wall = time.perf_counter() - t0
    return lat, tokens, wall


def run_server(args):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    print(f"starting the server (load + warm-up) on port {port} ...", flush=True)
    proc = start_server(args, port)
    rows = []
    try:
        urls = [data_url(p) for p in crops(args.requests, args.width, args.height)]
        asyncio.run(client_run(base, args.model, urls[:1], 1, [2]))  # compiles this crop size's vision/prefill
        for c in args.concurrency:
            print(f"concurrency {c} ...", flush=True)
            before = scrape_ttft(base)
            lat, tokens, wall = asyncio.run(client_run(base, args.model, urls, c, budgets(args)))
            after = scrape_ttft(base)
            n = after[1] - before[1]
            compile_s = after[3] - before[3]  # new group shapes compile during the run; the engine waits meanwhile
            rows.append({"mode": "serve", "concurrency": c, "requests": len(lat), "tokens": sum(tokens),
                         "wall_s": wall - compile_s, "wall_with_compile_s": wall, "compile_s": compile_s,
                         "latency_s": lat, "ttft_mean_s": (after[0] - before[0]) / n if n else float("nan"),
                         "ttft_p50_bucket_s": bucket_percentile(before, after, 50),
                         "ttft_p90_bucket_s": bucket_percentile(before, after, 90),
                         "peak_rss_gb": peak_rss_of(proc.pid)})
    finally:
        stop(proc)
    return rows


def stop(proc):
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.log.close()


def run_llama_server(args):
    """llama.cpp's server (bench_llamacpp.server_command: --llamacpp-slots sequences, continuous batching) over the
    same requests at each --concurrency, after one warm-up request; its peak RSS after each."""
    from scripts import bench_llamacpp as L
    if not L.server_available():
        raise SystemExit("llama-server is not built here: python scripts/bench_llamacpp.py build-server")
    name = L.ensure_converted(args.model, args.ckpt)
    # a slot holds a page's prompt (up to one image token per 28x28 pixels, and the text around it) and its answer
    slot_tokens = args.width * args.height // (28 * 28) + 64 + max(budgets(args)) + 1
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    print(f"starting llama-server on port {port} ...", flush=True)
    proc = start_server(args, port, L.server_command(args.model, name, port, args.llamacpp_format,
                                                     args.llamacpp_slots, slot_tokens, args.threads))
    rows = []
    try:
        urls = [data_url(p) for p in crops(args.requests, args.width, args.height)]
        asyncio.run(client_run(base, args.model, urls[:1], 1, [2]))
        for c in args.concurrency:
            print(f"llama-server, concurrency {c} ...", flush=True)
            lat, tokens, wall = asyncio.run(client_run(base, args.model, urls, c, budgets(args)))
            rows.append({"mode": "llama-server", "concurrency": c, "requests": len(lat), "tokens": sum(tokens),
                         "wall_s": wall, "latency_s": lat, "peak_rss_gb": peak_rss_of(proc.pid),
                         "format": args.llamacpp_format, "slots": args.llamacpp_slots})
    finally:
        stop(proc)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_serve_args(p)
    args = parse_main_args(p, worker)
    os.makedirs(args.out, exist_ok=True)
    modes = [m for m in args.modes if not (m == "infer" and args.no_infer)]
    rows = []
    for mode in modes:
        if mode in ("infer", "batch"):
            print(f"{mode} ...", flush=True)
            rows.append(run_json_worker(__file__, serve_infer_argv(args, mode), args.threads, mode))
        else:
            rows += run_server(args) if mode == "serve" else run_llama_server(args)
        write_json(args.out, f"benchmark_serve_{args.model}.json", serve_record(args, rows))  # each mode kept
    base = rows[0]
    base_tps = base["tokens"] / base["wall_s"]
    table = []
    for r in rows:
        tps = r["tokens"] / r["wall_s"]
        if r["mode"] == "infer":
            t50, t90 = percentile(r["ttft_s"], 50), percentile(r["ttft_s"], 90)
        else:
            t50, t90 = r.get("ttft_p50_bucket_s", float("nan")), r.get("ttft_p90_bucket_s", float("nan"))
        table.append((r["mode"], r["concurrency"], r["requests"] / r["wall_s"] * 3600, tps, t50, t90,
                      percentile(r["latency_s"], 50), percentile(r["latency_s"], 90), r.get("compile_s", 0.0),
                      r.get("peak_rss_gb", float("nan")), tps / base_tps))
    print_table([("mode", 12, ""), ("conc", 6, "d"), ("req/hour", 9, ".0f"), ("out tok/s", 11, ".2f"),
                 ("TTFT p50 s", 12, ".2f"), ("TTFT p90 s", 12, ".2f"), ("lat p50 s", 11, ".2f"),
                 ("lat p90 s", 11, ".2f"), ("compile s", 11, ".1f"), ("peak GB", 9, ".2f"),
                 (f"tok/s vs {base['mode']} c{base['concurrency']}", 27, ".2fx")], table)
    print("req/hour leaves out compile seconds (counted apart); llama.cpp compiles nothing; batch's concurrency is "
          "its --max-num-seqs; llama-server ran with -np --llamacpp-slots")
    if base["mode"] == "infer":
        print(f"bound for batching over infer one by one (its latency / its TTFT, summed): "
              f"{sum(base['latency_s']) / sum(base['ttft_s']):.2f}x")
    write_json(args.out, f"benchmark_serve_{args.model}.json", serve_record(args, rows))
    print("server TTFT percentiles are histogram bucket upper bounds; infer's are exact")


if __name__ == "__main__":
    main()
