"""MindSpore context set-up: device choice, execution mode, threads (the kernels a model runs: ms_ocr/plan.py)."""

import contextlib
import os
import sys
import threading

import mindspore as ms
import numpy as np

from ms_ocr.ops import kernels as routes, native


def ascend_available():
    try:
        return bool(ms.hal.is_available("Ascend"))
    except Exception:  # older MindSpore or a broken plugin: treat as absent
        return False


def setup(device="auto", threads=None):
    """Set graph mode on the chosen device and, on the CPU, the threads of the native kernels where any is routed.
    Returns "Ascend" or "CPU" (the target the plans of the models loaded next are made for).

    MindSpore's persistent compile cache (enable_compile_cache) is not switched on here: on its own, on reload, it
    mixed up the graphs one step had compiled for different input shapes (a batch run then failed with out-of-range
    gather indices); compile_cache.CompileCache uses it behind a manifest of every graph."""
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
    if target == "CPU":
        library = native.load()
        if library is not None and routes.choose(target).routes:  # its OpenMP pool starts before this thread's
            library.set_threads(threads or len(os.sched_getaffinity(0)))  # priority is lowered
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
    Graphs compiled before keep serving after it.

    On the CPU the ops run synchronously (pynative_synchronize): PyNative's asynchronous launch hands each op to two
    `backend_queue` threads that spin while they wait for work, and on a 2-core machine they took ~1.4 s of CPU each
    from a 4 s PP-DocLayoutV3 page (per-thread CPU time, /proc/self/task), the kernels' threads waiting behind them;
    run synchronously the page took 2.6-3.0 s (Intel Xeon family 6 model 167, 2 cores, ms_ocr/layout/README.md)."""
    mode = ms.get_context("mode")
    sync = ms.get_context("pynative_synchronize")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    if ms.get_context("device_target") == "CPU":
        ms.set_context(pynative_synchronize=True)
    try:
        yield
    finally:
        ms.set_context(mode=mode, pynative_synchronize=sync)
