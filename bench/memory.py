"""The decode step's memory bound: the machine's read bandwidth as the decode kernels' threads draw on it, and the
bytes a step must read (the decoder's weights as the run keeps them, and the KV cache up to the position).

A lone sequence's decode step reads every weight of the decoder and its head once, and the cache of the positions it
attends to; nothing is reused from a cache that small, so the step cannot take less than bytes / bandwidth. The
benchmarks print that bound beside the measured ms/token and the measured step as a multiple of it."""

import json
import os
import time

import numpy as np

# checkpoint tensor names of the vision side (PaddleOCR-VL, HunyuanOCR, DeepSeek-OCR-2), which a decode step never reads
VISION_PREFIXES = ("visual", "mlp_AR", "model.visual", "model.projector", "vit", "model.sam_model", "model.qwen2_model",
                   "model.vision_model", "model.image_newline", "model.view_seperator")
PROBE_BYTES = 2 << 30  # past any last-level cache (a shared host may show a VM several hundred MB of L3)


def read_bandwidth_gbs(threads, nbytes=PROBE_BYTES, rounds=5):
    """GB/s (1e9 bytes) of the best of `rounds` reads of `nbytes` by the native kernels' team of `threads` (the
    threads a decode step runs on), or None where the native kernels are not loaded."""
    from ms_ocr.ops import native
    kernels = native.load()
    if kernels is None:
        return None
    kernels.set_threads(threads)
    values = np.ones(nbytes // 4 // 64 * 64, np.float32)  # written once: every page is resident before timing
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        total = kernels.read_sum(values)
        best = min(best, time.perf_counter() - t0)
    if total != values.size:  # each value read exactly once (exact in fp32 up to 2**24 per lane)
        raise RuntimeError(f"read probe summed {total}, expected {values.size}")
    return values.nbytes / best / 1e9


def kv_bytes_per_token(config, kv_bytes=4):
    """Bytes of K and V one position holds over all layers: 2 * layers * kv_heads * head_dim * kv_bytes."""
    text = config.get("text_config", config)
    layers = text["num_hidden_layers"]
    heads = text.get("num_key_value_heads") or text["num_attention_heads"]
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    return 2 * layers * heads * head_dim * kv_bytes


def step_bytes(weight_bytes, kv_per_token, position):
    """Bytes one decode step reads at `position` (the tokens in the cache): the weights once, the cache once."""
    return weight_bytes + kv_per_token * position


def bound_ms(nbytes, gbs):
    """The step's floor in ms: its bytes at the read bandwidth."""
    return 1000 * nbytes / (gbs * 1e9)


def text_tensors(ckpt):
    """{name: (safetensors dtype, elements)} of the checkpoint's tensors a decode step may read (every one but the
    vision side's), from the files' headers."""
    from ms_ocr.convert.safetensors_io import read_header, weight_files
    out = {}
    for path in weight_files(ckpt):
        header, _ = read_header(path)
        for k, v in header.items():
            if k != "__metadata__" and not k.startswith(VISION_PREFIXES):
                out[k] = (v["dtype"], int(np.prod(v["shape"])))
    return out


def checkpoint_weight_format(ckpt, tensors=None):
    """"bf16" or "fp32": how the checkpoint stores its decoder layers' matrices (as the exact path keeps them), by
    the bytes of each dtype among them: a few small fp32 tensors (DeepSeek's MoE router gates, which transformers
    keeps in fp32) do not make a bf16 checkpoint an fp32 one."""
    by_dtype = {}
    for k, (dtype, n) in (text_tensors(ckpt) if tensors is None else tensors).items():
        if "layers" in k and k.endswith(".weight"):
            by_dtype[dtype] = by_dtype.get(dtype, 0) + n
    if not by_dtype:
        return "fp32"
    return "bf16" if max(by_dtype, key=by_dtype.get) == "BF16" else "fp32"


def decode_weight_bytes(ckpt, bytes_per_weight=4, tensors=None):
    """Bytes of decoder weights read per generated token at `bytes_per_weight` (4: fp32, 2: bf16, 1: int8): every
    text layer plus the output head (the tied embedding table, read once by the head; the input embedding is a
    single-row gather); of an MoE layer's routed experts, the share a token reads (top-k of n)."""
    tensors = text_tensors(ckpt) if tensors is None else tensors
    sizes = {k: bytes_per_weight * n for k, (_, n) in tensors.items()}
    with open(os.path.join(ckpt, "config.json")) as f:
        config = json.load(f)
    text = config.get("text_config") or config.get("language_config") or {}
    if text.get("n_routed_experts"):  # MoE: a token reads only its top-k routed experts
        share = text["num_experts_per_tok"] / text["n_routed_experts"]
        for k in sizes:
            if ".mlp.experts." in k:
                sizes[k] *= share
    if any(k.endswith("lm_head.weight") for k in sizes):  # untied or duplicated head: count the table once
        sizes.pop(next((k for k in sizes if k.endswith("embed_tokens.weight")), None), None)
    return sum(sizes.values())


# The decode roofline of the benchmarks' process table: the decoder's weights and the KV cache read once per token at
# the read bandwidth measured with the run's threads; a weight is 4 bytes in fp32, 2 in bf16 (a bf16 checkpoint kept
# in bf16: --dtype auto/bf16, docs/precision.md), 1 in int8 and 34/32 in llama.cpp's Q8_0 (a scale per 32).
WEIGHT_BYTES = {"fp32": 4, "bf16": 2, "int8": 1, "Q8_0": 34 / 32, "BF16": 2}


def checkpoint_text(ckpt):
    """(text_tensors of the checkpoint, its config.json): what the decode and prefill bounds read."""
    with open(os.path.join(ckpt, "config.json")) as f:
        return text_tensors(ckpt), json.load(f)


KV_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "f16": 2}  # a cached K or V element's bytes, by the cache's dtype


def kv_cache_of(name, m, args):
    """The KV cache dtype of process-table column `name` (its medians `m`): llama.cpp's default f16; ours the run's
    own (infer --json reports it: --kv-cache-dtype auto makes it bf16 under --quantize int8 and --dtype bf16), else
    as asked."""
    if name.startswith("llama.cpp"):
        return "f16"
    return m.get("kv_cache_dtype") or ("bf16" if args.kv_cache_dtype == "bf16" else "fp32")


def decode_bounds(args, med, gbs, tensors, config):
    """{column: (bound ms/token, bytes a step)} of the process table: each column's weights in its format, and the
    KV cache in its dtype (kv_cache_of) at the answer's middle position; tensors, config: checkpoint_text's."""
    text = config.get("text_config") or config.get("language_config") or config
    ours = "int8" if args.quantize.startswith("int8") else (
        "bf16" if args.dtype == "bf16" else checkpoint_weight_format(args.ckpt, tensors))
    weights = {}  # format -> bytes a step reads
    out = {}
    for name, m in med.items():
        fmt = name.split()[-1] if name.startswith("llama.cpp") else ours
        if fmt not in weights:
            weights[fmt] = decode_weight_bytes(args.ckpt, WEIGHT_BYTES[fmt], tensors)
        kv = kv_bytes_per_token(text, KV_BYTES[kv_cache_of(name, m, args)])
        nbytes = step_bytes(weights[fmt], kv, (m.get("prompt_tokens") or 0) + args.new_tokens / 2)
        out[name] = (bound_ms(nbytes, gbs), nbytes)
    return out
