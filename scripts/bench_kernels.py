"""A/B of each native CPU kernel against MindSpore's composed path, per ISA level of the kernel build.

    python scripts/bench_kernels.py [--arch native x86-64-v3] [--kernels attention decode_layer ...]
                                    [--threads 2] [--rounds 1]

Every (build, kernel, route) runs in its own subprocess (MS_OCR_NATIVE_ARCH selects the build,
MS_OCR_NATIVE_ROUTES the route: the kernel alone, or none = composed), graph mode, through the public op
function the models call, on a real-size shape; the figure is the median of the timed calls after a warm-up.
The composed route runs MindSpore's own kernels, which pick their SIMD level at run time whatever the build
(on an AVX-512 machine an x86-64-v3 build is compared with MindSpore's AVX-512 kernels). Each figure is given as
the median and the best (minimum) of the timed calls, over rounds: on a machine shared with other jobs the
best is the steadier of the two. Prints a table with the CPU model and each build's SIMD level and writes JSON (bench_out/bench_kernels.json).
ms_ocr/ops/kernels.py's ROUTES routes a kernel at a level only where it measured faster here
(docs/journal/native-kernels.md keeps the figures).
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from bench.report import print_table, write_json  # noqa: E402
os.environ.setdefault("GLOG_v", "3")

# name -> (what it is, timed calls)
KERNEL_CASES = {
    "attention": ("PaddleOCR-VL vision attention, one 512-query block: 16 heads x 3,996 keys, head_dim 72", 12),
    "decode_layer": ("PaddleOCR-VL decoder, one decode step of its 18 layers (one graph): hidden 1,024, 16/2 heads "
                     "x 128, MLP 3,072, 1,100 of 2,048 cache slots visible", 20),
    "matmul_t": ("PaddleOCR-VL head GEMV: x [1, 1,024] x W [103,424, 1,024]^T", 30),
    "gelu_tanh": ("GELU tanh (PaddleOCR-VL ViT MLP) on [3,996, 4,304]", 12),
    "gelu_erf": ("GELU erf (HunyuanOCR ViT MLP) on [3,996, 4,304]", 12),
    "vit_heads": ("PaddleOCR-VL ViT q/k/v bias adds, head transposes and rope, one 512-row block: 16 heads x 72", 30),
    "layer_norm": ("PaddleOCR-VL ViT LayerNorm, one 512-row block of 1,152", 30),
    "rms_norm": ("HunyuanOCR prefill RMSNorm, an 896-row prompt of 1,024", 30),
    "amx_products": ("HunyuanOCR prefill MLP products (exact path, bf16 weights), an 896-row prompt: gate and up "
                     "1,024 -> 3,584, down 3,584 -> 1,024", 12),
}
DECODER_LAYERS = 18  # PaddleOCR-VL's decoder (the same weights and cache in each: 54 MB a layer, past L3 anyway)
ROUTE_OF = {"attention": "attention", "decode_layer": "decode_layer", "matmul_t": "matmul_t",
            "gelu_tanh": "gelu", "gelu_erf": "gelu", "vit_heads": "vit_heads",
            "layer_norm": "layer_norm", "rms_norm": "rms_norm", "amx_products": "amx_products"}


def _inputs(kernel):
    import numpy as np
    rng = np.random.default_rng(0)
    f = lambda *shape, scale=1.0: (rng.standard_normal(shape) * scale).astype(np.float32)  # noqa: E731
    if kernel == "attention":
        return [f(1, 16, 512, 72), f(1, 16, 3996, 72), f(1, 16, 3996, 72)]
    if kernel == "matmul_t":
        return [f(1, 1024), f(103424, 1024, scale=0.03)]
    if kernel.startswith("gelu"):
        return [f(3996, 4304, scale=2.0)]
    if kernel == "vit_heads":
        angles = rng.uniform(0, 6, (1, 1, 512, 36)).astype(np.float32)
        angles = np.concatenate([angles, angles], -1)  # paired tables, as the tower's 2D rope
        return [f(512, 1152) for _ in range(3)] + [f(1152) for _ in range(3)] + [np.cos(angles), np.sin(angles)]
    if kernel == "layer_norm":
        return [f(512, 1152, scale=3.0), 1 + f(1152, scale=0.1), f(1152, scale=0.1)]
    if kernel == "rms_norm":
        return [f(896, 1024, scale=3.0), 1 + f(1024, scale=0.1)]
    if kernel == "amx_products":  # (the weights made bf16 by the worker)
        return [f(896, 1024), f(3584, 1024, scale=0.03), f(3584, 1024, scale=0.03), f(1024, 3584, scale=0.03)]
    hidden, hq, hkv, d, inter, t = 1024, 16, 2, 128, 3072, 2048
    angles = rng.uniform(0, 6, (1, 1, 1, d)).astype(np.float32)
    mask = np.full((1, 1, 1, t), -3.0e38, np.float32)
    mask[..., :1100] = 0.0
    weights = [1 + f(hidden, scale=0.1), f(hq * d, hidden, scale=0.03), f(hkv * d, hidden, scale=0.03),
               f(hkv * d, hidden, scale=0.03), f(hidden, hq * d, scale=0.03), 1 + f(hidden, scale=0.1),
               f(inter, hidden, scale=0.03), f(inter, hidden, scale=0.03), f(hidden, inter, scale=0.03)]
    return [f(1, 1, hidden), np.cos(angles), np.sin(angles), mask, f(1, hkv, t, d), f(1, hkv, t, d)] + weights


def _cell(kernel, kn):
    from mindspore import nn, ops
    from ms_ocr import ops as K
    from ms_ocr.nn import functional as F

    class Apply(nn.Cell):
        def construct(self, *args):
            if kernel == "attention":
                return K.attention(kn, args[0], args[1], args[2], None, 72 ** -0.5)
            if kernel == "matmul_t":
                return K.matmul_t(kn, args[0], args[1])
            if kernel == "gelu_tanh":
                return K.gelu_tanh(kn, args[0])
            if kernel == "gelu_erf":
                return K.gelu_erf(kn, args[0])
            if kernel == "vit_heads":
                return K.vit_heads(kn, *args, 16)
            if kernel == "layer_norm":
                return K.layer_norm(kn, args[0], args[1], args[2], 1e-6)
            if kernel == "rms_norm":
                return K.rms_norm(kn, args[0], args[1], 1e-6)
            if kernel == "amx_products":
                x, gate, up, down = args
                return K.matmul_t(kn, K.matmul_t(kn, x, gate) * K.matmul_t(kn, x, up), down)
            x, cos, sin, mask, kc, vc = args[:6]
            weights = args[6:]
            ks = []
            for _ in range(DECODER_LAYERS):  # what nn.blocks.DecoderLayer.read_only_step runs, layer after layer
                x, k, _ = F.decoder_layer_decode(kn, x, cos, sin, mask, kc, vc, weights, 16, 2, 128, 1e-5, K.silu,
                                                 True, True)
                ks.append(k)
            return x, ops.concat(ks, 2)

    return Apply()


def worker(kernel, threads):
    """Time one kernel on the route MS_OCR_NATIVE_ROUTES selects (set by the parent); prints one JSON line."""
    from mindspore import Tensor
    from mindspore import dtype as mstype
    from ms_ocr.device import setup
    from ms_ocr.ops import choose, native
    setup("cpu", threads)
    kn = choose("CPU")
    cell = _cell(kernel, kn)
    args = [Tensor(a) for a in _inputs(kernel)]
    if kernel == "amx_products":  # a bf16 checkpoint's weights, kept bf16 (--dtype auto)
        args = args[:1] + [a.astype(mstype.bfloat16) for a in args[1:]]
    kernels = native.load()
    out = cell(*args)
    (out[0] if isinstance(out, tuple) else out).asnumpy()  # compile + first call
    times = []
    for _ in range(KERNEL_CASES[kernel][1]):
        t0 = time.perf_counter()
        out = cell(*args)
        (out[0] if isinstance(out, tuple) else out).asnumpy()
        times.append(1000 * (time.perf_counter() - t0))
    return {"kernel": kernel, "routed": list(kn.routes), "ms": statistics.median(times),
            "ms_min": min(times), "isa_level": kernels.isa_level if kernels else None}


def run(arch, kernel, route, threads):
    env = dict(os.environ, MS_OCR_NATIVE_ARCH=arch, MS_OCR_NATIVE_ROUTES=ROUTE_OF[kernel] if route == "native"
               else "none", OMP_NUM_THREADS=str(threads), PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", kernel, "--threads", str(threads)],
                          capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{kernel} ({arch}, {route}) failed:\n{proc.stderr[-2000:]}")
    res = json.loads(lines[-1])
    expected = [ROUTE_OF[kernel]] if route == "native" else []
    if res["routed"] != expected:
        raise SystemExit(f"{kernel} ({arch}, {route}): routed {res['routed']}, expected {expected}")
    return res


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", nargs="+", default=["native", "x86-64-v3"], help="-march targets of the builds")
    p.add_argument("--kernels", nargs="+", default=list(KERNEL_CASES), choices=list(KERNEL_CASES))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1, help="rounds (medians reported); the route order alternates")
    p.add_argument("--out", default=os.path.join(REPO, "bench_out"))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.threads)))
        return
    from ms_ocr.ops import native
    rows = []
    for arch in args.arch:
        for kernel in args.kernels:
            figures = {"native": [], "composed": []}
            level = None
            for r in range(args.rounds):
                for route in (("native", "composed") if r % 2 == 0 else ("composed", "native")):
                    res = run(arch, kernel, route, args.threads)
                    figures[route].append(res)
                    level = level or res["isa_level"]
            row = {"arch": arch, "isa_level": level, "kernel": kernel, "case": KERNEL_CASES[kernel][0]}
            for route, runs in figures.items():
                row[f"{route}_ms"] = statistics.median(r["ms"] for r in runs)
                row[f"{route}_best_ms"] = min(r["ms_min"] for r in runs)
                row[f"{route}_rounds"] = [r["ms"] for r in runs]
            row["speedup"] = row["composed_ms"] / row["native_ms"]
            row["speedup_best"] = row["composed_best_ms"] / row["native_best_ms"]
            rows.append(row)
            print(f"{arch:<10} {level:<7} {kernel:<13} native {row['native_ms']:8.2f} (best {row['native_best_ms']:8.2f})"
                  f" ms  composed {row['composed_ms']:8.2f} (best {row['composed_best_ms']:8.2f}) ms  "
                  f"x{row['speedup']:5.2f} (best x{row['speedup_best']:5.2f})", flush=True)
    cpu = native.cpu_model()
    print(f"\nCPU: {cpu}; {args.threads} threads; {datetime.date.today()}")
    print_table([("build", 11, "<"), ("level", 8, "<"), ("kernel", 14, "<"), ("native ms", 11, ".2f"),
                 ("composed ms", 13, ".2f"), ("composed/native", 17, ".2f"), ("best: native", 14, ".2f"),
                 ("composed", 10, ".2f"), ("ratio", 7, ".2f")],
                [(r["arch"], r["isa_level"], r["kernel"], r["native_ms"], r["composed_ms"], r["speedup"],
                  r["native_best_ms"], r["composed_best_ms"], r["speedup_best"]) for r in rows])
    write_json(args.out, "bench_kernels.json",
               {"cpu": cpu, "threads": args.threads, "date": str(datetime.date.today()), "rows": rows})


if __name__ == "__main__":
    main()
