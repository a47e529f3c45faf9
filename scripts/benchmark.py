"""Benchmark ms_ocr against transformers on the same page, each framework in its own subprocess.

    python scripts/benchmark.py --model paddleocr-vl|hunyuan-ocr [--new-tokens 32] [--threads 2] [--repeat 3]

Builds (once, cached) a checkpoint with the real architecture and random weights, draws a 768x1024
document page, then runs ms_ocr and transformers (torch CPU, fp32) one after the other with the same
prompt and the same forced number of new tokens. Reports vision, prefill, decode tokens/s, peak RSS and
(ms_ocr) compile time separately; prints a table with ratios and writes JSON. Both name the CPU model, the SIMD
level of ms_ocr's native kernel build (MS_OCR_NATIVE_ARCH=x86-64-v3 benchmarks an AVX2/FMA build; see
docs/native-kernels.md) and of torch, and the kernel route of each figure (which native kernels ran in it, or
composed MindSpore kernels only).

--repeat N runs N rounds, each framework once per round in a fresh subprocess, the order alternating
between rounds (on a shared machine load drifts over minutes), and reports each figure's median over the
rounds beside every round's own ratios: on this machine one round does not separate a 10 % difference
from the noise.
"""

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

os.environ.setdefault("GLOG_v", "3")

from bench.memory import checkpoint_text, decode_bounds, kv_cache_of  # noqa: E402
from bench.references import reference_model_and_inputs  # noqa: E402,F401 - torch/transformers inside it only
from bench.report import median_result, process_report, round_ratios, tokens_agreement, write_json  # noqa: E402
from bench.run import add_run_args, ensure_checkpoint, precision_argv, run_json_worker  # noqa: E402
from ms_ocr.proc import peak_rss_gb  # noqa: E402 - plain /proc reads, no framework

# --isa levels of the process table and the -march ms_ocr's native kernels are built for at each
ISA_ARCH = {"avx2": "x86-64-v3"}


# The native kernels each figure's stage can run (ops/kernels.py KERNELS); the others in it are MindSpore's.
STAGE_KERNELS = {"vision_ms": ("attention", "gelu", "vit_heads", "layer_norm"),
                 "prefill_ms": ("matmul_t", "causal_attention"),
                 "decode_ms_per_token": ("decode_layer", "matmul_t"), "decode_tokens_per_s": ("decode_layer", "matmul_t")}


def kernel_routes(routed):
    """Each figure's kernel route: "native: <kernels>" for the native kernels routed in its stage, else
    "composed" (MindSpore's kernels only)."""
    out = {}
    for key, kernels in STAGE_KERNELS.items():
        used = [k for k in kernels if k in routed]
        out[key] = "native: " + "+".join(used) if used else "composed"
    return out


def worker_ms_ocr(args):
    from PIL import Image
    import numpy as np
    from ms_ocr.device import setup
    from ms_ocr.models import get as model_spec
    from ms_ocr.ops import native
    from ms_ocr.runtime import Buckets
    setup("cpu", args.threads)
    kernels = native.load()
    t0 = time.perf_counter()
    pipe = model_spec(args.model).load(args.ckpt, "CPU", args.dtype, Buckets(), quantize=args.quantize,
                                       kv_cache_dtype=args.kv_cache_dtype)
    load_s = time.perf_counter() - t0
    simd = {"isa_level": kernels.isa_level if kernels else None,
            "march": native.build_arch() if kernels else None, "routed": list(pipe.runtime.plan.kernels.routes)}
    import mindspore as ms
    bf16_weights = any(p.dtype == ms.bfloat16 for p in pipe.runtime.model.get_parameters())
    img = Image.open(args.image).convert("RGB")
    prep, _ = pipe.prepare([img], args.prompt)
    rt = pipe.runtime
    rt.release_after_vision(graphs=True)  # as infer runs a single image: vision graphs freed before prefill
    t0 = time.perf_counter()
    feats = pipe.encode_images(prep)
    feats.asnumpy()  # synchronise
    vision_s = time.perf_counter() - t0 - rt.compiler.seconds.get("vision", 0.0)
    t0 = time.perf_counter()
    logits = rt.prefill(prep, feats, args.new_tokens).asnumpy()[0]
    prefill_s = time.perf_counter() - t0 - rt.compiler.seconds.get("prefill", 0.0)
    tok = int(np.argmax(logits))
    s = prep.input_ids.shape[0]
    tokens = [tok]
    rt.decode(tok, s, prep.rope_delta, pipe.num_pos_axes).asnumpy()  # compile + first step, not timed
    t0 = time.perf_counter()
    for i in range(1, args.new_tokens):
        tok = int(np.argmax(rt.decode(tok, s + i, prep.rope_delta, pipe.num_pos_axes).asnumpy()[0]))
        tokens.append(tok)
    decode_s = time.perf_counter() - t0
    n = args.new_tokens - 1
    return {"framework": "ms_ocr", "load_s": load_s, "patches": sum(int(np.asarray(v.embed[0]).shape[0]) if not isinstance(v.embed[0], tuple)
                       else int(sum(np.asarray(view[0]).shape[0] for view in v.embed)) for v in prep.vision_inputs),
            "prompt_tokens": int(s), "vision_ms": 1000 * vision_s, "prefill_ms": 1000 * prefill_s,
            "decode_ms_per_token": 1000 * decode_s / n, "decode_tokens_per_s": n / decode_s,
            "compile_s": dict(rt.compiler.seconds), "peak_rss_gb": peak_rss_gb(), "tokens": tokens,
            "simd": simd, "routes": kernel_routes(simd["routed"]), "dtype": args.dtype,
            "kv_cache_dtype": str(rt.cache.dtype),
            "text_weights": "bf16" if bf16_weights else "fp32"}


VISION_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_local", "num_local_patches")


def reference_vision(model, inputs):
    """The reference's image features for the benchmark's inputs (its get_image_features signature)."""
    if "pixel_values_local" in inputs or "num_local_patches" in inputs:
        return model.model.get_image_features(inputs["pixel_values"], inputs.get("pixel_values_local"),
                                              inputs.get("num_local_patches"), return_dict=True)
    return model.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"], return_dict=True)


def worker_transformers(args):
    import torch
    from PIL import Image
    torch.set_num_threads(args.threads)
    img = Image.open(args.image).convert("RGB")
    t0 = time.perf_counter()
    model, inputs = reference_model_and_inputs(args.model, args.ckpt, img, args.prompt)
    load_s = time.perf_counter() - t0
    with torch.inference_mode():
        t0 = time.perf_counter()
        vision = reference_vision(model, inputs)
        vision_s = time.perf_counter() - t0
        # prefill alone: the same forward with the image features passed in (no second vision pass)
        text_inputs = {k: v for k, v in inputs.items() if k not in VISION_KEYS or k == "image_grid_thw"}
        t0 = time.perf_counter()
        out = model(**text_inputs, mm_encoder_outputs={"image": vision}, use_cache=True)
        prefill_s = time.perf_counter() - t0
        past = out.cache
        nxt = int(out.logits[0, -1].argmax())
        tokens = [nxt]
        t0 = time.perf_counter()
        for _ in range(1, args.new_tokens):
            out = model(input_ids=torch.tensor([[nxt]]), cache=past, use_cache=True)
            past = out.cache
            nxt = int(out.logits[0, -1].argmax())
            tokens.append(nxt)
        decode_s = time.perf_counter() - t0
    n = args.new_tokens - 1
    return {"framework": "transformers", "load_s": load_s, "patches": int(inputs["pixel_values"].shape[0]),
            "prompt_tokens": int(inputs["input_ids"].shape[1]), "vision_ms": 1000 * vision_s,
            "prefill_ms": 1000 * prefill_s, "decode_ms_per_token": 1000 * decode_s / n,
            "decode_tokens_per_s": n / decode_s, "peak_rss_gb": peak_rss_gb(), "tokens": tokens,
            "simd": {"isa_level": torch.backends.cpu.get_cpu_capability()}}


def run_worker(framework, args):
    return run_json_worker(__file__, ["--worker", framework, "--model", args.model, "--ckpt", args.ckpt, "--image",
                                      args.image, "--new-tokens", args.new_tokens, "--threads", args.threads,
                                      "--prompt", args.prompt, *precision_argv(args)],
                           args.threads, framework)


def simd_line(results, cpu):
    """The CPU model and each framework's SIMD level (ms_ocr: its native kernel build and -march)."""
    parts = [f"CPU: {cpu}"]
    ms, tf = results.get("ms_ocr"), results.get("transformers")
    if ms:
        simd = ms.get("simd", {})
        level = simd.get("isa_level")
        parts.append(f"ms_ocr native kernels: {level} build (-march={simd.get('march')})" if level
                     else "ms_ocr native kernels: none (MindSpore's only)")
    if tf:
        parts.append(f"torch: {tf.get('simd', {}).get('isa_level')}")
    return "; ".join(parts)


def report(results, bound_ms, rounds=(), cpu=None, bf16_bound_ms=None):
    ms, tf = results.get("ms_ocr"), results.get("transformers")
    print(simd_line(results, cpu or "?"))
    if len(rounds) > 1:
        print(f"medians over {len(rounds)} rounds (each framework in its own subprocess per round):")
    rows = [("vision ms", "vision_ms"), ("prefill ms", "prefill_ms"), ("decode ms/token", "decode_ms_per_token"),
            ("decode tokens/s", "decode_tokens_per_s"), ("peak RSS GB", "peak_rss_gb"), ("load s", "load_s")]
    routes = ms.get("routes", {}) if ms else {}
    print(f"{'figure':<18}{'ms_ocr':>12}{'transformers':>14}{'ms/tf':>9}  ms_ocr kernel route")
    for label, key in rows:
        a = ms.get(key) if ms else None
        b = tf.get(key) if tf else None
        ratio = f"{a / b:9.2f}" if a and b else " " * 9
        cell = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        print(f"{label:<18}{cell(a):>12}{cell(b):>14}{ratio}  {routes.get(key, '')}".rstrip())
    if ms and tf:
        vp_ms = ms["vision_ms"] + ms["prefill_ms"]
        vp_tf = tf["vision_ms"] + tf["prefill_ms"]
        print(f"{'vision+prefill ms':<18}{vp_ms:>12.1f}{vp_tf:>14.1f}{round_ratios(results)['vision_prefill']:9.2f}")
        print(f"greedy tokens identical: {tokens_agreement(results)}")
        if len(rounds) > 1:
            print("per round greedy tokens identical: " + ", ".join(tokens_agreement(r) for r in rounds))
            per = [round_ratios(r) for r in rounds]
            for key, label in (("vision_prefill", "vision+prefill ms/tf"), ("decode_speedup", "decode tokens/s ms/tf"),
                               ("rss", "peak RSS ms/tf")):
                print(f"per round {label}: " + ", ".join(f"{p[key]:.2f}" for p in per))
    if ms:
        bf16 = f", bf16 ~{bf16_bound_ms:.0f}" if bf16_bound_ms else ""
        print(f"ms_ocr text weights: {ms.get('text_weights', 'fp32')} (--dtype {ms.get('dtype', 'fp32')})")
        print(f"decode bandwidth bound ~{bound_ms:.0f} ms/token fp32{bf16}; ms_ocr compile s: "
              + ", ".join(f"{k} {v:.1f}" for k, v in ms["compile_s"].items()))


def precision_tag(args, sep):
    """What ms_ocr runs in when it is not the default: "" or e.g. " bf16", " int8", " bf16+int8" (sep first)."""
    parts = ([args.dtype] if args.dtype != "auto" else []) + ([args.quantize] if args.quantize != "none" else [])
    parts += [f"kv-{args.kv_cache_dtype}"] if args.kv_cache_dtype != "auto" else []
    return sep + "+".join(parts) if parts else ""


def cli_process(args, cache_dir, fresh):
    """`python -m ms_ocr.infer --json` as a user runs it, in its own process: process wall and peak RSS from the
    kernel (wait4), the rest from its --json timings. `fresh`: an empty compile cache (a first run on the machine);
    else the cache the previous call filled (a second run)."""
    import shutil
    from scripts.bench_llamacpp import run_measured
    if fresh:
        shutil.rmtree(cache_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "ms_ocr.infer", "--model", args.model, "--model-path", args.ckpt, "--image",
           args.image, "--prompt", args.prompt, "--max-new-tokens", str(args.new_tokens), "--ignore-eos",
           "--no-early-stop", *precision_argv(args),
           "--threads", str(args.threads), "--json"]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONPATH=REPO, MS_OCR_COMPILE_CACHE="1",
               MS_OCR_COMPILE_CACHE_DIR=cache_dir, GLOG_v="3")
    if args.isa != "native":  # ms_ocr's native kernels built for that level (MindSpore's own kernels stay as they are)
        env["MS_OCR_NATIVE_ARCH"] = ISA_ARCH[args.isa]
    t0 = time.perf_counter()
    out, code, usage = run_measured(cmd, env)
    wall = time.perf_counter() - t0
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if code or not lines:
        raise SystemExit(f"ms_ocr CLI failed ({code}):\n{out[-3000:]}")
    t = json.loads(lines[-1])["timings"]
    return {"framework": "ms_ocr CLI " + ("first run" if fresh else "second run") + precision_tag(args, " "),
            "wall_s": wall,
            "load_s": t["load_ms"] / 1000, "compile_s": sum(t["compile_ms"].values()) / 1000,
            "startup_s": t.get("startup_ms", 0) / 1000, "vision_ms": t["vision_ms"], "prefill_ms": t["prefill_ms"],
            "decode_ms_per_token": 1000 / t["decode_tokens_per_s"] if t["decode_tokens_per_s"] else None,
            "peak_rss_gb": usage.ru_maxrss / 2 ** 20, "rss_gb": t.get("rss_gb"), "prompt_tokens": t["prompt_tokens"],
            "compile_cache": t.get("compile_cache"), "kv_cache_dtype": t.get("kv_cache_dtype")}


def llamacpp_runs(args, fmt):
    """llama.cpp on the same page and checkpoint (converted to GGUF once), in its own process."""
    from scripts import bench_llamacpp as L
    name = L.ensure_converted(args.model, args.ckpt)
    r = L.run_page(args.model, name, args.image, fmt, args.new_tokens, args.threads, args.isa)
    r["framework"] = f"llama.cpp {fmt}"
    return r


def main():
    p = argparse.ArgumentParser()
    add_run_args(p)
    p.add_argument("--image", default=None)
    p.add_argument("--prompt", default=None, help="default: the model's first task prompt")
    p.add_argument("--new-tokens", type=int, nargs="+", default=[32],
                   help="tokens each answer is forced to (EOS ignored); several (e.g. 32 1024 4096) run the process "
                        "table once per count (long answers: the KV cache's bytes join the weights' at every step)")
    p.add_argument("--only", choices=["ms_ocr", "transformers", "peers"], default=None,
                   help="one framework of the in-process table, or the process table alone (peers)")
    p.add_argument("--repeat", type=int, default=1, help="rounds (medians reported); the order alternates")
    p.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                   help="also time what a user waits for, process by process: the ms_ocr CLI (first run on an empty "
                        "compile cache, second run) and llama.cpp (BF16 GGUF; needs scripts/bench_llamacpp.py build)")
    p.add_argument("--llamacpp-formats", default="BF16", help="GGUF text formats to time, comma-separated (BF16, "
                   "Q8_0; \"\": none)")
    p.add_argument("--isa", choices=["native", *ISA_ARCH], default="native",
                   help="process table: both runtimes' own kernels built for this level (llama.cpp: "
                        "bench_llamacpp.py build --isa LEVEL; ms_ocr: MS_OCR_NATIVE_ARCH); MindSpore's kernels keep "
                        "the machine's")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    counts = args.new_tokens
    if min(counts) < 1:
        raise SystemExit("--new-tokens must be at least 1")
    args.new_tokens = counts[0]
    if args.worker:
        fn = worker_ms_ocr if args.worker == "ms_ocr" else worker_transformers
        print(json.dumps(fn(args)))
        return
    if args.prompt is None:
        from ms_ocr.models import get as model_spec
        args.prompt = next(iter(model_spec(args.model).tasks.values()))
    args.ckpt = ensure_checkpoint(args.model, args.ckpt)
    if args.image is None:
        from bench.pages import document_page
        os.makedirs(args.out, exist_ok=True)
        args.image = os.path.join(args.out, "page_768x1024.png")
        document_page().save(args.image)
    if args.repeat < 1:
        raise SystemExit("--repeat must be at least 1")
    if args.peers or args.only == "peers":
        for n in counts:
            args.new_tokens = n
            peers(args, suffix=f"_{n}tok" if len(counts) > 1 else "")
        args.new_tokens = counts[0]
        if args.only == "peers":
            return
    if len(counts) > 1:
        print(f"the in-process table runs --new-tokens {counts[0]} (several counts are the process table's)")
    frameworks = [args.only] if args.only else ["ms_ocr", "transformers"]
    rounds = []
    for r in range(args.repeat):
        results = {}
        for fw in (frameworks if r % 2 == 0 else frameworks[::-1]):
            print(f"round {r + 1}/{args.repeat}: running {fw} ...", flush=True)
            results[fw] = run_worker(fw, args)
        rounds.append(results)
    results = {fw: median_result([r[fw] for r in rounds]) for fw in frameworks}
    gbs = read_bandwidth(args.threads)
    from bench.memory import decode_weight_bytes, text_tensors
    tensors = text_tensors(args.ckpt)
    bound_ms = 1000 * decode_weight_bytes(args.ckpt, 4, tensors) / (gbs * 1e9)
    bf16_bound_ms = 1000 * decode_weight_bytes(args.ckpt, 2, tensors) / (gbs * 1e9)
    print(f"read bandwidth {gbs:.1f} GB/s ({args.threads} threads, bench/memory.py)")
    from ms_ocr.ops.native import cpu_model
    cpu = cpu_model()
    report(results, bound_ms, rounds, cpu, bf16_bound_ms)
    write_json(args.out, f"benchmark_{args.model}.json",
               {"model": args.model, "threads": args.threads, "new_tokens": args.new_tokens, "cpu": cpu,
                "simd": {fw: r.get("simd") for fw, r in results.items()},
                "kernel_routes": results.get("ms_ocr", {}).get("routes"), "decode_bound_ms": bound_ms,
                "decode_bound_ms_bf16": bf16_bound_ms, "read_gbs": gbs, "dtype": args.dtype, "kv_cache_dtype": args.kv_cache_dtype,
                "results": results, "rounds": rounds})


def peers(args, suffix=""):
    """The process table: ms_ocr CLI first and second run, llama.cpp, `--repeat` rounds alternating; its JSON file
    name ends with `suffix`."""
    from ms_ocr.ops.native import cpu_model
    from scripts import bench_llamacpp as L
    cache_dir = os.path.join(args.out, "compile_cache")
    columns = {}
    wanted = [f for f in args.llamacpp_formats.split(",") if f]  # "" : ms_ocr's processes alone
    formats = wanted if L.available(args.isa) else []
    if wanted and not formats:
        build = "build" + ("" if args.isa == "native" else f" --isa {args.isa}")
        print(f"llama.cpp is not built here (python scripts/bench_llamacpp.py {build}): its columns are left out")
    for r in range(args.repeat):
        order = ["cli"] + formats if r % 2 == 0 else formats + ["cli"]
        for item in order:
            print(f"round {r + 1}/{args.repeat}: {item} ...", flush=True)
            if item == "cli":
                for fresh in (True, False):
                    res = cli_process(args, cache_dir, fresh)
                    columns.setdefault(res["framework"], []).append(res)
            else:
                res = llamacpp_runs(args, item)
                columns.setdefault(res["framework"], []).append(res)
    print(f"CPU: {cpu_model()}; kernels built for: {args.isa}; {args.threads} threads; {args.model}; "
          f"{args.new_tokens} new tokens; medians of {args.repeat} round(s)")
    med = process_report(columns)
    for name, runs in columns.items():  # the KV cache's dtype an ms_ocr run reported (the same in every round)
        med[name]["kv_cache_dtype"] = next((r["kv_cache_dtype"] for r in runs if r.get("kv_cache_dtype")), None)
    gbs = read_bandwidth(args.threads)
    tensors, config = checkpoint_text(args.ckpt)  # the checkpoint's headers and config, read once for both bounds
    bounds = decode_bounds(args, med, gbs, tensors, config)
    for name, (b_ms, nbytes) in bounds.items():
        got = med[name].get("decode_ms_per_token")
        print(f"decode bound {name}: {nbytes / 1e6:.0f} MB a step ({kv_cache_of(name, med[name], args)} KV cache) "
              f"at {gbs:.1f} GB/s = {b_ms:.1f} ms/token"
              + (f"; measured {got:.1f} = {got / b_ms:.2f}x the bound" if got else ""))
    rate = product_rate(args.threads)
    prefill = prefill_bounds(med, rate, tensors, config) if rate else {}
    for name, (b_ms, flops) in prefill.items():
        got = med[name].get("prefill_ms")
        print(f"prefill bound {name}: {flops / 1e9:.0f} GFLOP at {rate:.0f} GFLOP/s (fp32 products) = {b_ms:.0f} ms"
              + (f"; measured {got:.0f} = {got / b_ms:.2f}x the bound" if got else ""))
    suffix = ("" if args.isa == "native" else f"_{args.isa}") + precision_tag(args, "_") + suffix
    write_json(args.out, f"benchmark_{args.model}_processes{suffix}.json",
               {"model": args.model, "cpu": cpu_model(), "isa": args.isa, "threads": args.threads,
                "new_tokens": args.new_tokens, "medians": med, "runs": columns, "read_gbs": gbs,
                "decode_bounds_ms": {n: b for n, (b, _) in bounds.items()}, "product_gflops": rate,
                "prefill_bounds_ms": {n: b for n, (b, _) in prefill.items()}})


def probe(module, call, threads):
    """bench.<module>.<call> (a measurement returning a number) in a process of its own with `threads`: (the number,
    or None where it failed or returned None; the process's stderr)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=REPO)
    code = f"from bench import {module}; print({module}.{call})"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
    value = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "None"
    return (None if out.returncode or value == "None" else float(value)), out.stderr.strip()


def read_bandwidth(threads):
    """The machine's read bandwidth (GB/s) with `threads` of the native kernels' team, measured in a process of its
    own (bench/memory.py); exits where the native kernels are not built (the bound is theirs)."""
    value, err = probe("memory", f"read_bandwidth_gbs({int(threads)})", threads)
    if value is None:
        raise SystemExit(f"the read probe failed (are the native kernels built?): {err[-500:]}")
    return value


def product_rate(threads):
    """GFLOP/s of MindSpore's fp32 MatMul with `threads` on a prefill-sized product, measured in a process of its own
    (bench/compute.py); None where it failed (the table is kept, only the prefill bound is missing)."""
    value, err = probe("compute", f"product_gflops({int(threads)})", threads)
    if value is None:
        print(f"the product probe failed, no prefill bound: {err[-300:]}")
    return value


def prefill_bounds(med, rate, tensors, config):
    """{column: (bound ms, flops)} of the process table: each column's prompt through the text model's products and
    causal attention at `rate` GFLOP/s (bench/compute.py); tensors, config: checkpoint_text's."""
    from bench.compute import prefill_flops
    out = {}
    for name, m in med.items():
        if m.get("prompt_tokens"):
            flops = prefill_flops(config, tensors, int(m["prompt_tokens"]))
            out[name] = (1000 * flops / (rate * 1e9), flops)
    return out


if __name__ == "__main__":
    main()
