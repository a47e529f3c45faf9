import atexit
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The command lines the tests start share a compile cache of this test process (removed at its exit), as a user's
# runs on one machine do: a subprocess compiles only what no earlier one compiled (the tiny models' graphs
# otherwise took most of each run). The tests of the cache itself pass their own folders; in-process tests keep
# it off (tests/conftest.py).
_COMPILE_CACHE = tempfile.mkdtemp(prefix="ms_ocr_test_compile_")
atexit.register(shutil.rmtree, _COMPILE_CACHE, True)


def run_module(module, *args, env=None, timeout=600, cwd=ROOT):
    e = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3", MS_OCR_OFFLINE="1", MS_OCR_COMPILE_CACHE="1",
             MS_OCR_COMPILE_CACHE_DIR=_COMPILE_CACHE)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=cwd)


def assert_one_line_error(proc, *needles):
    assert proc.returncode != 0, proc.stdout
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], lines[0]
