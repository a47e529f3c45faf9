"""Under CI=true a gate (an accuracy or precision promise of the README, @pytest.mark.gate) that skips fails the run
(tests/conftest.py); elsewhere it is a skip. A pytest run of its own on a file of two gates."""

import os
import subprocess
import sys
import textwrap

from tests.cli_util import ROOT

GATES = textwrap.dedent('''
    import pytest

    @pytest.mark.gate
    def test_a_gate_that_cannot_run():
        pytest.skip("no bf16 dot products here")

    @pytest.mark.skipif(True, reason="fonts missing")
    @pytest.mark.gate
    def test_a_gate_skipped_by_its_marker():
        pass

    def test_an_ordinary_skip():
        pytest.skip("not a gate")
''')


def _run(tmp_path, ci):
    (tmp_path / "test_gates_demo.py").write_text(GATES)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci is not None else {})
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", ROOT,
                           "-c", os.path.join(ROOT, "pytest.ini"), "--confcutdir", ROOT,
                           "-p", "tests.conftest", str(tmp_path / "test_gates_demo.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_skipped_gate_fails_under_ci(tmp_path):
    proc = _run(tmp_path, "true")
    assert proc.returncode == 1, proc.stdout
    # a skip inside the test fails it; a skip by its marker fails its set-up (pytest counts that as an error)
    assert "1 failed, 1 skipped, 1 error" in proc.stdout
    assert "gate skipped under CI=true (no bf16 dot products here)" in proc.stdout
    assert "gate skipped under CI=true (fonts missing)" in proc.stdout


def test_a_skipped_gate_is_a_skip_elsewhere(tmp_path):
    for ci in (None, "false", "0"):
        proc = _run(tmp_path, ci)
        assert proc.returncode == 0 and "3 skipped" in proc.stdout, proc.stdout
