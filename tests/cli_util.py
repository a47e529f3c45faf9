import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_module(module, *args, env=None, timeout=600, cwd=ROOT):
    e = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3", MS_OCR_OFFLINE="1")
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
