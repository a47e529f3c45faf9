"""The batch runner keeps each user's results apart (issue 26), end to end on the tiny PaddleOCR-VL checkpoint:
file names that are not UTF-8, another job into the same --out, a second run on a folder in use, Ctrl-C during
start-up and mid-run, an empty input folder."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.cli_util import ROOT, assert_one_line_error, run_module
from bench.pages import text_page

LATIN1 = b"r\xe9sum\xe9.png"  # "résumé.png" in Latin-1: not valid UTF-8


def _batch(model, out, *inputs, extra=(), cwd=ROOT):
    return run_module("ms_ocr.batch", "--model", "paddleocr-vl", "--model-path", model, "--input", *inputs,
                      "--out", str(out), "--max-batch-size", "2", "--max-output-length", "4", "--no-progress", *extra,
                      cwd=cwd)


def _lines(path):
    return open(path, "rb").read().decode("utf-8").splitlines()  # strict: every line valid UTF-8


@pytest.fixture
def pages(tmp_path):
    folder = tmp_path / "pages"
    folder.mkdir()
    for i, w in enumerate((64, 72, 80)):
        text_page(w, 64, f"p{i}").save(folder / f"{i}.png")
    return folder


def test_file_name_not_utf8_round_trips(tiny_dir, tmp_path):
    """Such a name stopped the batch at that file on every rerun ('surrogates not allowed'). Now every page is
    done, results.jsonl is valid UTF-8 whose key gives back the file's bytes, the Markdown file names are valid
    UTF-8, and infer --json prints valid UTF-8 with the same escape."""
    pages = tmp_path / "pages"
    pages.mkdir()
    text_page(64, 64, "a").save(pages / "a.png")
    text_page(72, 64, "b").save(os.path.join(os.fsencode(pages), LATIN1))
    text_page(80, 64, "c").save(pages / "c.png")
    out = tmp_path / "out"
    proc = _batch(tiny_dir, out, str(pages))
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in _lines(out / "results.jsonl")]
    assert len(records) == 3 and all(r["ok"] for r in records)
    target = os.path.join(os.fsencode(pages), LATIN1)
    (odd,) = [r for r in records if os.fsencode(r["source"]) == target]
    assert os.fsencode(odd["key"]) == target
    assert sum('r\\udce9sum\\udce9.png"' in line for line in _lines(out / "results.jsonl")) == 1
    names = sorted(os.listdir(os.fsencode(out / "markdown")))
    assert len(names) == 3 and all(n.decode("utf-8") for n in names)
    assert os.fsencode(pages).lstrip(b"/").replace(b"/", b"+") + b"+r~E9sum~E9.png.md" in names
    # rerun: nothing left to do, nothing fails
    again = _batch(tiny_dir, out, str(pages))
    assert again.returncode == 0 and len(_lines(out / "results.jsonl")) == 3, again.stderr

    env = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3", MS_OCR_OFFLINE="1")
    single = subprocess.run([sys.executable, "-m", "ms_ocr.infer", "--model", "paddleocr-vl", "--model-path",
                             tiny_dir, "--image", os.fsdecode(target), "--max-new-tokens", "4", "--json"],
                            capture_output=True, env=env, cwd=ROOT, timeout=600)
    assert single.returncode == 0, single.stderr
    record = json.loads(single.stdout.decode("utf-8").splitlines()[-1])
    assert os.fsencode(record["image"]) == target and record["token_ids"] == odd["token_ids"]


def test_another_job_into_the_same_out_is_refused(tiny_dir, pages, tmp_path):
    """A rerun with another task, checkpoint or generation setting skipped every page and kept the old text. It
    is refused now, naming what differs; --overwrite replaces the old job's results."""
    import shutil
    out = tmp_path / "out"
    assert _batch(tiny_dir, out, str(pages), extra=("--task", "ocr")).returncode == 0
    before = (out / "results.jsonl").read_bytes()
    proc = _batch(tiny_dir, out, str(pages), extra=("--task", "table"))
    assert_one_line_error(proc, "holds the results of another job", 'task "ocr" -> "table"', "--overwrite")
    proc = _batch(tiny_dir, out, str(pages), extra=("--task", "ocr", "--temperature", "0.7", "--seed", "1"))
    assert_one_line_error(proc, "temperature 0.0 -> 0.7", "seed null -> 1")
    other = tmp_path / "ckpt"
    shutil.copytree(tiny_dir, other)
    (other / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))
    assert_one_line_error(_batch(str(other), out, str(pages), extra=("--task", "ocr")), "checkpoint")
    assert (out / "results.jsonl").read_bytes() == before  # nothing was written

    # the same job again (the checkpoint copied elsewhere is the same checkpoint): every page skipped
    same = _batch(str(shutil.copytree(tiny_dir, tmp_path / "moved")), out, str(pages), extra=("--task", "ocr"))
    assert same.returncode == 0 and "skipped                  3" in same.stderr, same.stderr
    proc = _batch(tiny_dir, out, str(pages), extra=("--task", "table", "--overwrite"))
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in _lines(out / "results.jsonl")]
    assert len(records) == 3 and {r["task"] for r in records} == {"table"} and len({r["job"] for r in records}) == 1
    assert json.loads((out / "job.json").read_text())["identity"]["task"] == "table"


def test_second_run_on_the_same_out_is_refused(tiny_dir, pages, tmp_path):
    """Two runs on one --out both did every page and wrote each record twice; the second is refused at once."""
    import fcntl
    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".lock", "w") as holder:  # what a running batch holds (exclusive; a rank: shared)
        holder.write(str(os.getpid()))
        holder.flush()
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        proc = _batch(tiny_dir, out, str(pages))
        assert_one_line_error(proc, f"{out} is in use by another run (pid {os.getpid()})", "another --out")
        fcntl.flock(holder.fileno(), fcntl.LOCK_SH)
        assert_one_line_error(_batch(tiny_dir, out, str(pages)), "is in use by another run")
    assert not (out / "results.jsonl").exists()


def test_empty_input_folder_is_an_error(tiny_dir, tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "notes.txt").write_text("no pages here")
    assert_one_line_error(_batch(tiny_dir, tmp_path / "out", str(tmp_path / "empty")),
                          f"input folder {tmp_path / 'empty'} has no images or PDFs")


def _start(tiny_dir, src, out, tokens):
    env = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3", MS_OCR_OFFLINE="1")
    return subprocess.Popen([sys.executable, "-m", "ms_ocr.batch", "--model", "paddleocr-vl", "--model-path", tiny_dir,
                             "--input", str(src), "--out", str(out), "--max-batch-size", "1", "--max-output-length",
                             str(tokens), "--no-progress"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(proc, ready, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None and not ready():
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before the signal: " + proc.communicate()[1]


def _assert_interrupted(proc, *needles):
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: interrupted") and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_ctrl_c_during_start_up(tiny_dir, tmp_path):
    """SIGINT while `import mindspore` runs aborted the interpreter ('Fatal Python error', a traceback)."""
    src = tmp_path / "pages"
    src.mkdir()
    text_page(64, 64, "x").save(src / "x.png")
    proc = _start(tiny_dir, src, tmp_path / "out", 4)
    maps = f"/proc/{proc.pid}/maps"
    _wait_for(proc, lambda: "mindspore" in open(maps).read())  # MindSpore's libraries are being loaded
    proc.send_signal(signal.SIGINT)
    _assert_interrupted(proc, "saved 0 results")


def test_ctrl_c_mid_run_saves_and_says_so(tiny_dir, tmp_path):
    """SIGINT once pages are running: MindSpore's handler turned it into SIGTERM and the process died without a
    word. Now: exit 130, one line with the number of results saved, every saved record intact; the same
    command resumes."""
    src = tmp_path / "pages"
    src.mkdir()
    for i in range(6):
        text_page(64 + 16 * i, 64, f"k{i}").save(src / f"{i}.png")
    out = tmp_path / "out"
    results = out / "results.jsonl"
    proc = _start(tiny_dir, src, out, 24)
    _wait_for(proc, lambda: results.exists() and results.read_bytes().count(b"\n") >= 2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    saved = [json.loads(line) for line in _lines(results)]
    assert proc.returncode == 130 and err.strip() == (
        f"error: interrupted; saved {len(saved)} results this run ({len(saved)} pages done in {out}); run the same "
        "command again to resume"), err
    assert 2 <= len(saved) < 6 and all(r["ok"] for r in saved)
    done = _start(tiny_dir, src, out, 24)
    assert done.wait(timeout=600) == 0, done.stderr.read()
    assert sorted(json.loads(line)["key"] for line in _lines(results)) == sorted(str(src / f"{i}.png")
                                                                                 for i in range(6))


def test_a_page_is_the_same_under_any_spelling_of_its_path(tiny_dir, tmp_path):
    """A page was identified by its path as typed: resuming `--input scans/` as `--input ./scans/` redid every
    page (duplicate records), and the same relative command run in another folder skipped that folder's other
    files as done and wrote the first folder's text into their Markdown. Now a page is its resolved absolute
    path plus the file's size and mtime."""
    root = type(tmp_path)(os.path.realpath(tmp_path))
    one, two = root / "one", root / "two"
    for folder, labels in ((one, ("a0", "a1")), (two, ("b0", "b1"))):
        (folder / "scans").mkdir(parents=True)
        for i, label in enumerate(labels):
            text_page(64 + 16 * i, 64, label).save(folder / "scans" / f"{i}.png")
    out = tmp_path / "out"
    first = _batch(tiny_dir, out, "scans/", cwd=one)
    assert first.returncode == 0, first.stderr
    again = _batch(tiny_dir, out, "./scans/", os.path.join("..", "one", "scans", "0.png"), cwd=one)
    assert again.returncode == 0 and "skipped                  2" in again.stderr, again.stderr
    records = [json.loads(line) for line in _lines(out / "results.jsonl")]
    assert sorted(r["key"] for r in records) == [str(one / "scans" / "0.png"), str(one / "scans" / "1.png")]

    other = _batch(tiny_dir, out, "scans/", cwd=two)  # the same command in another folder: other pages
    assert other.returncode == 0 and "skipped                  0" in other.stderr, other.stderr
    records = [json.loads(line) for line in _lines(out / "results.jsonl")]
    by_key = {r["key"]: r for r in records}
    assert len(records) == 4 and sorted(by_key) == sorted(str(f / "scans" / n) for f in (one, two)
                                                          for n in ("0.png", "1.png"))
    from ms_ocr.batch.results import doc_name
    for key, record in by_key.items():
        assert record["source"] == key and record["stamp"]
        with open(out / "markdown" / doc_name(key), encoding="utf-8", newline="") as f:  # a "\r" in the text stays
            md = f.read()
        assert md == record["text"].strip() + "\n"

    # a file replaced in place (another size) is read again; the other pages stay done
    text_page(200, 64, "new a0").save(one / "scans" / "0.png")
    third = _batch(tiny_dir, out, str(one / "scans"), cwd=two)
    assert third.returncode == 0 and "skipped                  1" in third.stderr, third.stderr
    latest = {}
    for line in _lines(out / "results.jsonl"):
        r = json.loads(line)
        latest[r["key"]] = r
    assert latest[str(one / "scans" / "0.png")]["stamp"] != by_key[str(one / "scans" / "0.png")]["stamp"]


def test_overwrite_removes_only_what_batch_wrote(tiny_dir, pages, tmp_path):
    """--overwrite removed the whole OUT/markdown/ (a user's notes.md with it); now only the files the old
    records name (their Markdown, dumps, drawings) and the result files go."""
    out = tmp_path / "out"
    assert _batch(tiny_dir, out, str(pages), extra=("--task", "ocr", "--dump")).returncode == 0
    written = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert any(str(p).startswith("dumps/") for p in written) and any(str(p).startswith("markdown/") for p in written)
    (out / "markdown" / "notes.md").write_text("mine")
    (out / "dumps" / "keep.txt").write_text("mine")
    (out / "holiday.jpg").write_bytes(b"mine")
    proc = _batch(tiny_dir, out, str(pages), extra=("--task", "table", "--overwrite"))
    assert proc.returncode == 0, proc.stderr
    for mine in ("markdown/notes.md", "dumps/keep.txt", "holiday.jpg"):
        assert (out / mine).read_bytes() == b"mine"
    assert sorted(p.name for p in (out / "dumps").iterdir()) == ["keep.txt"]  # the old job's dumps are gone
    assert len(list((out / "markdown").glob("*.png.md"))) == 3  # the new job's Markdown
