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
from ms_ocr.device import setup
setup("cpu", 2)
nice = {}
for tid in os.listdir("/proc/self/task"):
    name = open(f"/proc/self/task/{tid}/comm").read().strip()
    nice[name if int(tid) != threading.get_native_id() else "main"] = os.getpriority(os.PRIO_PROCESS, int(tid))
print(json.dumps(nice))
"""


def _thread_nice(env_value):
    env = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3")
    env.pop("MS_OCR_CPU_MAIN_NICE", None)
    if env_value is not None:
        env["MS_OCR_CPU_MAIN_NICE"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), os.getpriority(os.PRIO_PROCESS, 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux behaviour")
def test_cpu_setup_lowers_only_the_launching_thread():
    nice, base = _thread_nice(None)
    assert nice["main"] == 19
    pool = {k: v for k, v in nice.items() if k.startswith(("KernelThread_", "ActorThread_"))}
    assert "ActorThread_0" in pool and "KernelThread_0" in pool
    assert set(pool.values()) == {base}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux behaviour")
def test_main_nice_zero_keeps_the_priority():
    nice, base = _thread_nice("0")
    assert nice["main"] == base
