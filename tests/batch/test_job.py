"""Job identity of an output folder and its lock (ms_ocr/batch/job.py), no model."""

import json
import os
import subprocess
import sys

import pytest

from ms_ocr.batch import job as J

IDENTITY = {"tool": "ms_ocr.batch", "model": "paddleocr_vl", "checkpoint": "abc", "task": "ocr", "seed": None}


def test_check_job(tmp_path):
    out = str(tmp_path)
    assert J.check_job(out, IDENTITY, False, has_results=False) == "new"
    assert J.check_job(out, IDENTITY, False, has_results=True) == "adopted"
    J.write_job(out, IDENTITY, {"checkpoint_path": "/x"})
    assert J.read_job(out) == IDENTITY and J.check_job(out, dict(IDENTITY), False, True) == "same"
    other = dict(IDENTITY, task="table", seed=3)
    with pytest.raises(J.JobError) as info:
        J.check_job(out, other, False, True)
    assert str(info.value) == (f'{out} holds the results of another job (task "ocr" -> "table"; seed null -> 3); '
                               "use another --out, or --overwrite to replace them")
    assert J.check_job(out, other, True, True) == "overwrite"
    assert J.job_id(IDENTITY) == J.job_id(dict(reversed(list(IDENTITY.items())))) != J.job_id(other)
    (tmp_path / J.JOB_FILE).write_text("[1]")
    with pytest.raises(J.JobError, match="is not a job record"):
        J.read_job(out)


def test_checkpoint_fingerprint(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text(json.dumps({"a": 1}))
    weights = os.urandom(3 << 20)
    (ck / "model.safetensors").write_bytes(weights)
    first = J.checkpoint_fingerprint(str(ck))
    moved = tmp_path / "moved"
    ck.rename(moved)
    assert J.checkpoint_fingerprint(str(moved)) == first  # a moved checkpoint is the same checkpoint
    (moved / ".cache").mkdir()
    (moved / ".cache" / "model.safetensors.metadata").write_text("etag 2026-11-24T07:00")  # huggingface-cli's
    assert J.checkpoint_fingerprint(str(moved)) == first
    (moved / "model.safetensors").write_bytes(weights[:-1] + bytes([weights[-1] ^ 1]))  # last byte changed
    assert J.checkpoint_fingerprint(str(moved)) != first
    (moved / "model.safetensors").write_bytes(weights)
    (moved / "config.json").write_text(json.dumps({"a": 2}))
    assert J.checkpoint_fingerprint(str(moved)) != first


def test_folder_lock(tmp_path):
    out = str(tmp_path / "out")
    with J.FolderLock(out):
        with pytest.raises(J.JobError, match=f"in use by another run \\(pid {os.getpid()}\\)"):
            J.FolderLock(out).__enter__()
        with pytest.raises(J.JobError):
            J.FolderLock(out, "rank0-of2").__enter__()
    with J.FolderLock(out, "rank0-of2"), J.FolderLock(out, "rank1-of2"):  # ranks of one run share the folder
        with pytest.raises(J.JobError):
            J.FolderLock(out, "rank1-of2").__enter__()
        with pytest.raises(J.JobError):
            J.FolderLock(out).__enter__()
    # released when the holder dies, even by SIGKILL
    code = (f"import os; from ms_ocr.batch.job import FolderLock; FolderLock({out!r}).__enter__(); "
            "os.kill(os.getpid(), 9)")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == -9
    with J.FolderLock(out):
        pass
