"""The test workers' cores (tests/conftest.py): each xdist worker keeps its own share of the machine's cores, and a
worker whose siblings have finished takes theirs back, with the processes it started."""

import os
import subprocess

import pytest

from tests import conftest


@pytest.mark.parametrize("worker,count,cpus,want", [
    ("gw0", "2", {0, 1}, (0, [{0}, {1}])),
    ("gw1", "2", {0, 1, 2, 3}, (1, [{0, 2}, {1, 3}])),
    ("gw1", "2", {4, 6, 7}, (1, [{4, 7}, {6}])),
    ("gw2", "2", {0, 1}, (0, [{0}, {1}])),  # started in place of a crashed worker
    ("gw2", "3", {0, 1}, None),  # more workers than cores: left to the scheduler
    ("", "0", {0, 1}, None),  # not a worker
])
def test_core_shares(monkeypatch, worker, count, cpus, want):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    monkeypatch.delenv(conftest.PIN_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(cpus))
    assert conftest._core_shares() == want
    monkeypatch.setenv(conftest.PIN_ENV, "0")
    assert conftest._core_shares() is None


def test_a_finished_siblings_cores_go_to_this_worker_and_its_children(monkeypatch, tmp_path):
    before = os.sched_getaffinity(0)  # in the suite: this worker's own share
    cores = sorted(set().union(*conftest._Cores.shares) if conftest._Cores.shares else before)
    if len(cores) < 2:
        pytest.skip("one core")
    monkeypatch.setattr(conftest, "_cores_folder", lambda pid: str(tmp_path))
    monkeypatch.setattr(conftest._Cores, "index", 0)
    monkeypatch.setattr(conftest._Cores, "shares", [{cores[0]}, {cores[1]}])
    monkeypatch.setattr(conftest._Cores, "taken", {0})
    child = subprocess.Popen(["sleep", "60"])
    try:
        conftest._set_cores({cores[0]}, [os.getpid(), child.pid])
        conftest._take_back_freed_cores()  # the sibling still runs
        assert os.sched_getaffinity(0) == os.sched_getaffinity(child.pid) == {cores[0]}
        (tmp_path / "1.done").write_text("")
        conftest._take_back_freed_cores()
        assert os.sched_getaffinity(0) == os.sched_getaffinity(child.pid) == {cores[0], cores[1]}
        assert conftest._Cores.taken == {0, 1}
    finally:
        child.kill()
        child.wait()
        conftest._set_cores(before, conftest._descendants(os.getpid()))
