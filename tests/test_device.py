"""setup() on CPU lowers the launching (main) thread's priority below MindSpore's kernel pool threads, which it
creates first so they keep the process's nice value; MS_OCR_CPU_MAIN_NICE=0 leaves the priority alone."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = """
import json, os, threading
start = os.getpriority(os.PRIO_PROCESS, 0)
from ms_ocr.device import setup
setup("cpu", 2)
me = threading.get_native_id()
others = [os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task") if int(t) != me]
print(json.dumps({"start": start, "main": os.getpriority(os.PRIO_PROCESS, me), "others": others}))
"""


def _thread_nice(env_value):
    env = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3")
    env.pop("MS_OCR_CPU_MAIN_NICE", None)
    if env_value is not None:
        env["MS_OCR_CPU_MAIN_NICE"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True,
                         preexec_fn=_reset_nice)
    nice = json.loads(out.stdout.strip().splitlines()[-1])
    if nice["start"] >= 19:  # this test process already runs at the lowest priority: nothing to lower
        pytest.skip("the probe starts at nice 19")
    return nice, nice.pop("start")


def _reset_nice():
    """The probe starts at nice 0 where permitted (an earlier setup() in this test process may have niced the
    thread that forks it); otherwise at the inherited value."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    except OSError:
        pass


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux behaviour")
def test_cpu_setup_lowers_only_the_launching_thread():
    nice, start = _thread_nice(None)
    assert nice["main"] == 19
    # MindSpore's kernel pool (ActorThread_0, KernelThread_0) and its queues keep the starting priority
    assert len(nice["others"]) >= 2 and set(nice["others"]) == {start}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux behaviour")
def test_main_nice_zero_keeps_the_priority():
    nice, start = _thread_nice("0")
    assert nice["main"] == start


def test_kv_cache_dtype_resolution():
    """--kv-cache-dtype: fp32 and bf16 as asked; auto bf16 where --dtype bf16 computes in bf16, else the compute
    dtype (fp32 on the CPU: the exact path keeps an fp32 cache); anything else a clear error."""
    import mindspore as ms
    from ms_ocr.plan import resolve_kv_dtype
    assert resolve_kv_dtype("auto", ms.float32, False) == ms.float32
    assert resolve_kv_dtype("auto", ms.float32, True) == ms.bfloat16
    assert resolve_kv_dtype("auto", ms.bfloat16, True) == ms.bfloat16  # Ascend, --dtype bf16
    assert resolve_kv_dtype("auto", ms.float16, False) == ms.float16  # Ascend, --dtype fp16
    assert resolve_kv_dtype("bf16", ms.float32, False) == ms.bfloat16
    assert resolve_kv_dtype("fp32", ms.float32, True) == ms.float32
    with pytest.raises(ValueError, match="unknown --kv-cache-dtype 'fp8'"):
        resolve_kv_dtype("fp8", ms.float32, False)


def test_auto_kv_cache_is_bf16_under_bf16_compute_for_dense_decoders(tiny_dir, tmp_path_factory, graph_mode,
                                                                      monkeypatch, capsys):
    """--kv-cache-dtype auto: bf16 under --dtype bf16 where the products run in bf16 (stood in for here, on any CPU)
    or under --quantize int8 (any CPU), where the native decode layer reads the cache: a dense decoder's
    (PaddleOCR-VL), and a MoE decoder's (DeepSeek-OCR-2) where the host step runs its layers through it; fp32 on the
    exact path, and for a MoE decoder the host step does not serve (MS_OCR_HOST_STEP=0 here), whose composed
    attention widens the whole cache each step; asked for, as asked (that bf16 cache said to cost decode time)."""
    import mindspore as ms
    from ms_ocr import plan
    from ms_ocr.models.deepseek_ocr2 import SPEC as deepseek_ocr2
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from tests.helpers.tiny_deepseek import make_tiny_checkpoint
    # products in bf16 stood in for: the plan says so, its kernels stay the exact ones
    monkeypatch.setattr(plan, "bf16_products", lambda dtype, target, kernels: kernels if dtype == "bf16" else None)
    cache = lambda spec, folder, *args, **kw: spec.load(folder, "CPU", *args, **kw).runtime.cache.dtype
    assert cache(paddleocr_vl, tiny_dir, "bf16") == ms.bfloat16
    assert cache(paddleocr_vl, tiny_dir, "auto") == ms.float32
    assert cache(paddleocr_vl, tiny_dir, "bf16", kv_cache_dtype="fp32") == ms.float32
    assert cache(paddleocr_vl, tiny_dir, "auto", quantize="int8") == ms.bfloat16
    assert cache(paddleocr_vl, tiny_dir, "auto", quantize="int8-g32") == ms.bfloat16
    assert cache(paddleocr_vl, tiny_dir, "auto", quantize="int8", kv_cache_dtype="fp32") == ms.float32
    assert "widens the cache" not in capsys.readouterr().err
    folder = make_tiny_checkpoint(str(tmp_path_factory.mktemp("ds2_kv")))
    loaded = deepseek_ocr2.load(folder, "CPU", "auto", quantize="int8").runtime
    assert loaded.cache.dtype == ms.bfloat16 and loaded.plan.kv_cache_name == "bf16"
    loaded.reset_cache(1, 64)
    assert loaded.host_step.serves(loaded.cache, 1)  # the layers the plan counted on: DecodeLayer reads that cache
    del loaded
    assert cache(deepseek_ocr2, folder, "bf16") == ms.bfloat16
    assert cache(deepseek_ocr2, folder, "auto") == ms.float32
    assert "widens the cache" not in capsys.readouterr().err
    monkeypatch.setenv("MS_OCR_HOST_STEP", "0")
    assert cache(deepseek_ocr2, folder, "bf16") == ms.float32
    assert cache(deepseek_ocr2, folder, "auto", quantize="int8") == ms.float32
    assert "widens the cache" not in capsys.readouterr().err
    assert cache(deepseek_ocr2, folder, "auto", kv_cache_dtype="bf16") == ms.bfloat16
    assert "MoE decoder's attention widens the cache to fp32 every step" in capsys.readouterr().err


EAGER_PROBE = """
import json, threading, time
import numpy as np
from ms_ocr.device import setup, eager
setup("cpu", 2)
import mindspore as ms
from mindspore import ops
x = ms.Tensor(np.ones((64, 64), np.float32))
before = (ms.get_context("mode"), ms.get_context("pynative_synchronize"))
with eager():
    inside = (ms.get_context("mode"), ms.get_context("pynative_synchronize"))
    for _ in range(200):
        x = ops.matmul(x, x) * 0.01
    x.asnumpy()
    queues = [open(f"/proc/self/task/{t}/comm").read().strip() for t in __import__("os").listdir("/proc/self/task")]
after = (ms.get_context("mode"), ms.get_context("pynative_synchronize"))
print(json.dumps({"before": before, "inside": inside, "after": after,
                  "backend_queues": sum(q == "backend_queue" for q in queues)}))
"""


def test_eager_runs_ops_synchronously_on_the_cpu_and_restores_the_context():
    """device.eager() on the CPU: PyNative with pynative_synchronize on inside the block (no `backend_queue` threads
    spinning beside the kernels: ~1.4 s of CPU each on a PP-DocLayoutV3 page), graph mode and the previous setting
    after it."""
    env = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3")
    out = subprocess.run([sys.executable, "-c", EAGER_PROBE], capture_output=True, text=True, env=env, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    import mindspore as ms
    assert got["before"] == [ms.GRAPH_MODE, False] and got["after"] == [ms.GRAPH_MODE, False]
    assert got["inside"] == [ms.PYNATIVE_MODE, True]
    assert got["backend_queues"] == 0
