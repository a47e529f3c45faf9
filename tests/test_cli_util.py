"""tests/cli_util.run_module: a command line forked from the server that has imported MindSpore answers as a new
`python -m` process does (exit code, output, argv, environment, working directory, timeout), and falls back to a
new process where the environment holds something MindSpore may read as it loads."""

import json
import os
import subprocess

import pytest

from tests import cli_util
from tests.cli_util import ROOT, run_module


def _probe(*args, **kw):
    proc = run_module("tests.helpers.cli_probe", *args, **kw)
    return proc, json.loads(proc.stdout.splitlines()[0])


@pytest.mark.parametrize("fork", ["1", "0"])
def test_exit_codes_output_argv_env_and_cwd(fork, tmp_path, monkeypatch):
    monkeypatch.setenv("MS_OCR_TEST_FORK", fork)
    proc, seen = _probe("3", "a b", "ü", env={"MS_OCR_PROBE": "x"}, cwd=str(tmp_path))
    assert proc.returncode == 3 and proc.stderr == "to stderr\n"
    assert seen["argv"] == ["3", "a b", "ü"] and seen["probe"] == "x" and seen["main"] == "__main__"
    assert seen["cwd"] == str(tmp_path) and seen["path0"] == str(tmp_path)
    # forked by the server, or started by this process
    assert seen["ppid"] == (cli_util._ForkServer.instance.proc.pid if fork == "1" else os.getpid())
    proc, _ = _probe("0")
    assert proc.returncode == 0
    proc, _ = _probe("raise")
    assert proc.returncode == 1 and "ValueError: probe failure" in proc.stderr and "Traceback" in proc.stderr


def test_other_environments_get_a_new_process(monkeypatch):
    """Keys MindSpore or its libraries may read as they load are the server's; ms_ocr's, ranks', pytest's are the
    child's."""
    monkeypatch.setenv("MS_OCR_TEST_FORK", "1")
    base = cli_util._base_env()
    assert cli_util._ForkServer.usable(dict(base, MS_OCR_HOME="/tmp/x", RANK_ID="1", PYTEST_CURRENT_TEST="t"))
    assert not cli_util._ForkServer.usable(dict(base, OMP_NUM_THREADS="1"))
    assert not cli_util._ForkServer.usable(dict(base, PYTHONPATH=ROOT + os.pathsep + "/x"))
    assert not cli_util._ForkServer.usable({k: v for k, v in base.items() if k != "GLOG_v"})
    _, seen = _probe("0", env={"OMP_NUM_THREADS": "1"})
    assert seen["ppid"] == os.getpid()
    monkeypatch.setenv("MS_OCR_TEST_FORK", "0")
    assert not cli_util._ForkServer.usable(base)


def test_a_change_to_this_process_environment_restarts_the_server(monkeypatch, tmp_path):
    """Something in the test process sets a variable (torch: TORCHINDUCTOR_CACHE_DIR) after the server started:
    later command lines are still forked, from a server started with it (they fell back to new processes)."""
    monkeypatch.setenv("MS_OCR_TEST_FORK", "1")
    _probe("0")
    first = cli_util._ForkServer.instance.proc.pid
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    _, seen = _probe("0")
    assert seen["ppid"] == cli_util._ForkServer.instance.proc.pid != first
    _, seen = _probe("0")
    assert seen["ppid"] == cli_util._ForkServer.instance.proc.pid


def test_timeout_kills_the_child_and_raises(monkeypatch):
    monkeypatch.setenv("MS_OCR_TEST_FORK", "1")
    with pytest.raises(subprocess.TimeoutExpired):
        run_module("tests.helpers.cli_probe", "sleep", timeout=3)
    proc, _ = _probe("5")  # the server still answers
    assert proc.returncode == 5
