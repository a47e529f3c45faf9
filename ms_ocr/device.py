"""MindSpore context set-up: device choice, execution mode, threads, kernel family."""

import mindspore as ms

from ms_ocr import ops

DTYPES = {"fp32": ms.float32, "float32": ms.float32, "bf16": ms.bfloat16, "bfloat16": ms.bfloat16,
          "fp16": ms.float16, "float16": ms.float16}


def ascend_available():
    try:
        return bool(ms.hal.is_available("Ascend"))
    except Exception:  # older MindSpore or a broken plugin: treat as absent
        return False


def compile_cache_dir(root, model):
    """A persistent compile-cache folder for `model` under `root`, keyed by a hash of ms_ocr's sources and the
    MindSpore version, so graphs cached by other code are never reused."""
    import hashlib
    import os
    pkg = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha1(ms.__version__.encode())
    for base, dirs, files in sorted(os.walk(pkg)):
        dirs.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            with open(os.path.join(base, name), "rb") as f:
                h.update(name.encode() + f.read())
    return os.path.join(os.path.expanduser(root), f"{model}-{h.hexdigest()[:12]}")


def setup(device="auto", threads=None, compile_cache=None):
    """Set graph mode on the chosen device and pick the kernel family once. Returns "Ascend" or "CPU".

    compile_cache: a folder for MindSpore's persistent compile cache (graphs compiled by an earlier run with
    the same inputs load from it: measured on the tiny PaddleOCR-VL, 5.9 s of compiling became 1.0 s)."""
    if device not in ("auto", "cpu", "ascend"):
        raise ValueError(f"unknown device {device!r} (auto, cpu or ascend)")
    if device == "auto":
        target = "Ascend" if ascend_available() else "CPU"
    else:
        target = "Ascend" if device == "ascend" else "CPU"
        if target == "Ascend" and not ascend_available():
            raise RuntimeError("--device ascend was requested but no Ascend NPU/CANN runtime is available")
    ms.set_context(mode=ms.GRAPH_MODE, device_target=target)
    if compile_cache:
        ms.set_context(enable_compile_cache=True, compile_cache_path=compile_cache)
    if threads:
        ms.set_context(runtime_num_threads=threads)
    ops.configure(target)
    return target


def resolve_dtype(dtype, target, checkpoint_tags):
    """(compute dtype, rounding of weights: "bf16" | "fp16" | None) for the requested --dtype.

    CPU computes in fp32 (MindSpore has no fast CPU bf16/fp16 kernels): bf16 means bf16-rounded weights
    with fp32 compute. Ascend computes in the requested half precision; auto follows the checkpoint.
    """
    if dtype not in ("auto", "fp32", "bf16", "fp16"):
        raise ValueError(f"unknown dtype {dtype!r} (auto, fp32, bf16 or fp16)")
    if target != "Ascend":
        return ms.float32, (dtype if dtype in ("bf16", "fp16") else None)
    if dtype == "auto":
        dtype = "bf16" if "BF16" in checkpoint_tags else ("fp16" if "F16" in checkpoint_tags else "fp32")
    return DTYPES[dtype], None
