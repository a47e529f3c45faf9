"""The offline batch runner end to end on the tiny PaddleOCR-VL checkpoint: folders with images, a two-page
PDF and corrupt files; records, Markdown, report, precision dump vs transformers; resume after a kill; two
ranks each taking its shard and merging."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.cli_util import ROOT, run_module
from bench.pages import text_page

NEW = 6


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs")
    text_page(96, 128, "a").save(root / "a.png")
    (root / "sub").mkdir()
    text_page(160, 64, "b").convert("RGB").save(root / "sub" / "b.jpg")
    first, second = text_page(90, 120, "p1"), text_page(120, 90, "p2")
    first.save(root / "c.pdf", save_all=True, append_images=[second], resolution=72)
    whole = (root / "a.png").read_bytes()
    (root / "bad.png").write_bytes(whole[:len(whole) // 2])  # truncated
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not a pdf\n")
    return root


def _batch(folder, out, *inputs, extra=()):
    return run_module("ms_ocr.batch", "--model", "paddleocr-vl", "--model-path", folder, "--input", *inputs,
                      "--out", str(out), "--task", "ocr", "--max-batch-size", "2", "--max-input-length", "256",
                      "--max-output-length", str(NEW), "--no-progress", *extra)


def _records(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_folder_with_pdf_and_corrupt_files(tiny_dir, docs, tmp_path):
    out = tmp_path / "out"
    proc = _batch(tiny_dir, out, str(docs), extra=("--dump", "*a.png"))
    assert proc.returncode == 3, proc.stderr  # finished, with failed inputs
    recs = {r["key"]: r for r in _records(out / "results.jsonl")}
    d = str(docs)
    ok = [f"{d}/a.png", f"{d}/c.pdf#1", f"{d}/c.pdf#2", f"{d}/sub/b.jpg"]
    assert sorted(recs) == sorted(ok + [f"{d}/bad.png", f"{d}/broken.pdf#1"])
    for key in ok:
        r = recs[key]
        assert r["ok"] and r["num_tokens"] == len(r["token_ids"]) and 1 <= r["num_tokens"] <= NEW
        assert r["timings"]["prompt_tokens"] > 0 and r["timings"]["latency_ms"] >= r["timings"]["first_token_ms"] > 0
    assert recs[f"{d}/c.pdf#2"]["page"] == 2 and recs[f"{d}/a.png"]["page"] == 0
    assert not recs[f"{d}/bad.png"]["ok"] and "truncated or corrupt" in recs[f"{d}/bad.png"]["error"]
    assert "not a readable PDF" in recs[f"{d}/broken.pdf#1"]["error"]

    # the batched record equals a single-image run of the CLI
    single = run_module("ms_ocr.infer", "--model", "paddleocr-vl", "--model-path", tiny_dir, "--image",
                        f"{d}/a.png", "--task", "ocr", "--max-new-tokens", str(NEW), "--json")
    assert single.returncode == 0, single.stderr
    assert json.loads(single.stdout.splitlines()[-1])["token_ids"] == recs[f"{d}/a.png"]["token_ids"]

    # Markdown per document, PDF pages in order
    assert sorted(os.listdir(out / "markdown")) == sorted(d[1:].replace("/", "+") + f"+{n}.md"
                                                         for n in ("a.png", "c.pdf", "sub+b.jpg"))
    text = (out / "markdown" / (d[1:].replace("/", "+") + "+c.pdf.md")).read_text(encoding="utf-8")
    assert text.index("<!-- page 1 -->") < text.index("<!-- page 2 -->")
    assert recs[f"{d}/c.pdf#2"]["text"].strip() in text

    with open(out / "report.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert (row["pages"], row["ok"], row["failed"], row["skipped"]) == ("6", "4", "2", "0")
    assert int(row["generated_tokens"]) == sum(recs[k]["num_tokens"] for k in ok)
    assert float(row["compile_s"]) > 0 and float(row["peak_rss_gb"]) > 0

    # precision dump of a.png: per-step logits equal transformers' generate (compare_dumps reports a match)
    dump = recs[f"{d}/a.png"]["dump"]
    assert np.load(os.path.join(dump, "token_ids.npy")).tolist() == recs[f"{d}/a.png"]["token_ids"]
    ref = tmp_path / "ref"
    subprocess.run([sys.executable, "scripts/dump_reference.py", "--model", "paddleocr-vl", "--model-path", tiny_dir,
                    "--image", f"{d}/a.png", "--max-new-tokens", str(NEW), "--out", str(ref)], cwd=ROOT, check=True,
                   capture_output=True)
    cmp = subprocess.run([sys.executable, "scripts/compare_dumps.py", dump, str(ref)], cwd=ROOT,
                         capture_output=True, text=True)
    assert cmp.returncode == 0 and "MATCH" in cmp.stdout, cmp.stdout + cmp.stderr
    logits = np.load(os.path.join(ref, "logits.npy"))
    logits[3] += 0.05 * np.abs(logits).max()
    np.save(os.path.join(ref, "logits.npy"), logits)
    cmp = subprocess.run([sys.executable, "scripts/compare_dumps.py", dump, str(ref)], cwd=ROOT,
                         capture_output=True, text=True)
    assert cmp.returncode == 1 and "first_logit_divergence=3" in cmp.stdout, cmp.stdout

    # a second run skips what is done, retries the failures, keeps every finished record
    again = _batch(tiny_dir, out, str(docs))
    assert again.returncode == 3, again.stderr
    recs2 = _records(out / "results.jsonl")
    assert len(recs2) == 8 and [r["key"] for r in recs2[6:]] == [f"{d}/bad.png", f"{d}/broken.pdf#1"]
    with open(out / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert (rows[1]["pages"], rows[1]["skipped"]) == ("2", "4")


def test_resume_after_kill_loses_nothing(tiny_dir, tmp_path):
    src = tmp_path / "pages"
    src.mkdir()
    for i in range(6):
        text_page(64 + 16 * i, 96, f"k{i}").save(src / f"{i}.png")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3", MS_OCR_OFFLINE="1")
    cmd = [sys.executable, "-m", "ms_ocr.batch", "--model", "paddleocr-vl", "--model-path", tiny_dir, "--input",
           str(src), "--out", str(out), "--max-batch-size", "1", "--max-output-length", "8", "--no-progress"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "results.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (
            results.exists() and results.read_bytes().count(b"\n") >= 2):
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = _records(results)
    assert 2 <= len(before) < 6 and all(r["ok"] for r in before)
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    after = _records(results)
    assert after[:len(before)] == before  # finished records untouched, not recomputed
    assert sorted(r["key"] for r in after) == sorted(str(src / f"{i}.png") for i in range(6))


def test_two_ranks_shard_and_merge(tiny_dir, tmp_path):
    src = tmp_path / "pages"
    src.mkdir()
    for i in range(5):
        text_page(80, 64 + 16 * i, f"s{i}").save(src / f"{i}.png")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3", MS_OCR_OFFLINE="1")
    procs = [subprocess.Popen([sys.executable, "-m", "ms_ocr.batch", "--model", "paddleocr-vl", "--model-path",
                               tiny_dir, "--input", str(src), "--out", str(out), "--max-output-length", "4",
                               "--no-progress"], env=dict(env, RANK_ID=str(r), RANK_SIZE="2"), cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for r in range(2)]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read()
    shard0 = [r["key"] for r in _records(out / "results.rank0-of2.jsonl")]
    shard1 = [r["key"] for r in _records(out / "results.rank1-of2.jsonl")]
    keys = [str(src / f"{i}.png") for i in range(5)]
    assert sorted(shard0) == keys[0::2] and sorted(shard1) == keys[1::2]
    merged = _records(out / "results.jsonl")
    assert [r["key"] for r in merged] == keys and all(r["ok"] for r in merged)
    assert len(os.listdir(out / "markdown")) == 5


def test_bad_arguments_are_one_line_errors(tiny_dir, tmp_path):
    from tests.cli_util import assert_one_line_error
    assert_one_line_error(_batch(tiny_dir, tmp_path / "o", str(tmp_path / "missing")), "input not found")
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"image": "x.png", "task": "poetry"}\n')
    assert_one_line_error(_batch(tiny_dir, tmp_path / "o", str(manifest)), "unknown task 'poetry'")
    manifest.write_text("not json\n")
    assert_one_line_error(_batch(tiny_dir, tmp_path / "o", str(manifest)), "line 1: not JSON")
    assert_one_line_error(_batch(tiny_dir, tmp_path / "o", str(tmp_path), extra=("--max-batch-size", "0")),
                          "--max-batch-size must be in 1..256, not 0")
