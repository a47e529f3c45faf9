"""MindSpore context set-up: device choice, execution mode, threads, kernel family."""

import contextlib
import os
import sys
import threading

import mindspore as ms
import numpy as np

from ms_ocr import ops

DTYPES = {"fp32": ms.float32, "float32": ms.float32, "bf16": ms.bfloat16, "bfloat16": ms.bfloat16,
          "fp16": ms.float16, "float16": ms.float16}


def ascend_available():
    try:
        return bool(ms.hal.is_available("Ascend"))
    except Exception:  # older MindSpore or a broken plugin: treat as absent
        return False


def setup(device="auto", threads=None):
    """Set graph mode on the chosen device and pick the kernel family once. Returns "Ascend" or "CPU".

    MindSpore's persistent compile cache (enable_compile_cache) is not switched on here: on its own, on reload, it
    mixed up the graphs one step had compiled for different input shapes (a batch run then failed with out-of-range
    gather indices); compiler.CompileCache uses it behind a manifest of every graph."""
    if device not in ("auto", "cpu", "ascend"):
        raise ValueError(f"unknown device {device!r} (auto, cpu or ascend)")
    if device == "auto":
        target = "Ascend" if ascend_available() else "CPU"
    else:
        target = "Ascend" if device == "ascend" else "CPU"
        if target == "Ascend" and not ascend_available():
            raise RuntimeError("--device ascend was requested but no Ascend NPU/CANN runtime is available")
    ms.set_context(mode=ms.GRAPH_MODE, device_target=target)
    if threads:
        ms.set_context(runtime_num_threads=threads)
    ops.configure(target)
    if target == "CPU":
        kernels = ops.backend.native_kernels()
        if kernels is not None:  # its OpenMP pool starts before this thread's priority is lowered
            kernels.set_threads(threads or len(os.sched_getaffinity(0)))
        lower_launcher_priority()
    return target


MAIN_NICE_ENV = "MS_OCR_CPU_MAIN_NICE"


def lower_launcher_priority():
    """Give the CPU kernel threads priority over the thread that launches kernels (this one). Returns the nice
    value set, or None when left alone.

    MindSpore runs a graph's kernels from the calling thread, and ThreadPool::ParallelLaunch hands every task
    of a parallel kernel to the pool's workers (ActorThread_0, KernelThread_0, ... — as many as cores) and then
    busy-waits with sched_yield until they finish. On a 2-core machine that third, spinning thread took a large
    share of the CPU samples during the vision encoder (perf), and the ViT layers ran faster once the launcher was
    niced. So: create the pool now (one eager op; its threads inherit the current nice
    value), then raise this thread's nice value alone (Linux nice is per thread). Set MS_OCR_CPU_MAIN_NICE=0
    to keep it (e.g. when the process shares the machine with other busy processes); the default is 19."""
    nice = int(os.environ.get(MAIN_NICE_ENV, "19"))
    if nice <= 0 or not sys.platform.startswith("linux"):
        return None
    (ms.Tensor(np.ones(2, np.float32)) + 1).asnumpy()  # creates the kernel thread pool at the current nice value
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if current < nice:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        return os.getpriority(os.PRIO_PROCESS, tid)
    except OSError:  # not permitted in this sandbox: run as before
        return None


@contextlib.contextmanager
def eager():
    """Run MindSpore ops eagerly (PyNative) inside the block, then return to the previous execution mode.
    Graphs compiled before keep serving after it."""
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        yield
    finally:
        ms.set_context(mode=mode)


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


_NOTICES = set()


def bf16_products(dtype, target):
    """Whether --dtype `dtype` computes its products in bf16 on `target`: on Ascend always for bf16 (the device's
    own); on the CPU for --dtype bf16 where the CPU has bf16 dot products (ops.backend.enable_bf16_products: the
    matrices of vision and prefill, rounded activations, fp32 accumulation; norms, softmax, rope, residuals and a
    decode step's products stay fp32). Elsewhere --dtype bf16 keeps the exact path on bf16-rounded weights and says
    so once on stderr."""
    if dtype != "bf16":
        return False
    if target == "Ascend":
        return True
    reason = ops.backend.enable_bf16_products()
    if reason is not None and reason not in _NOTICES:
        _NOTICES.add(reason)
        print(f"[ms_ocr] --dtype bf16: products stay fp32 on bf16-rounded weights ({reason})", file=sys.stderr)
    return reason is None


def resolve_kv_dtype(kv_cache_dtype, compute_dtype, auto_bf16):
    """The KV caches' dtype for --kv-cache-dtype: fp32 or bf16 as asked; auto is bf16 where `auto_bf16` (--dtype
    bf16 computes in bf16, or --quantize int8, and the native decode layer reads the cache; torch's bf16 autocast
    and llama.cpp's default f16 cache, beside its Q8_0 weights too, hold K/V in 16 bits) and the compute dtype
    otherwise (fp32 on the CPU: the exact path).
    A bf16 cache halves the bytes a decode step reads per cached position (HunyuanOCR: 96 KB a position instead
    of 192) and the cache's memory; the new token's k and v are rounded to bf16 as they are stored, and attention
    widens them again (fp32 sums)."""
    from ms_ocr.models.quantize import KV_CACHE_DTYPES
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"unknown --kv-cache-dtype {kv_cache_dtype!r} ({', '.join(KV_CACHE_DTYPES)})")
    if kv_cache_dtype == "auto":
        return ms.bfloat16 if auto_bf16 else compute_dtype
    return DTYPES[kv_cache_dtype]


def bf16_resident(dtype, target, checkpoint_tags):
    """Whether the text weights a model names (VLMCell.bf16_weight_names) stay bf16 in memory: on the CPU, for
    --dtype bf16 or auto on a checkpoint holding bf16 tensors, where the native decode kernels (which read bf16
    weights and widen them in registers) are routed. Widening bf16 to fp32 is exact, so this computes bit for
    bit what the fp32 path computes on the same checkpoint, reading half the bytes per decode step. --dtype fp32
    keeps every weight fp32 (the A/B); Ascend computes in bf16 already."""
    if target == "Ascend" or dtype not in ("auto", "bf16"):
        return False
    if dtype == "auto" and "BF16" not in checkpoint_tags:
        return False
    b = ops.backend
    return (b.NATIVE_DECODE_LAYER is not None and b.NATIVE_MATMUL_T is not None and b.NATIVE_GATHER_ROWS is not None
            and b.NATIVE_WIDEN is not None)
