"""The persistent compile cache (ms_ocr/compile_cache.py CompileCache) across real processes of the CLI on the tiny
PaddleOCR-VL (bf16, as the hub ships it): a second process compiles nothing the first compiled and answers the
same; another image size, another checkpoint's weights, a changed key, a corrupt entry, two processes at once
and a batch of several sizes (what mixed graphs up with MindSpore's cache alone) all answer as without it."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.cli_util import ROOT, run_module
from bench.pages import text_page

NEW = "6"


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    sizes = {"a.png": (96, 128), "b.png": (160, 64), "c.png": (120, 90)}
    for name, (w, h) in sizes.items():
        text_page(w, h, name).save(root / name)
    return root


@pytest.fixture(scope="module")
def bf16_dir(tiny_checkpoint):
    return tiny_checkpoint(dtype="bfloat16")


def _env(cache_dir, on=True):
    return {"MS_OCR_COMPILE_CACHE": "1" if on else "0", "MS_OCR_COMPILE_CACHE_DIR": str(cache_dir)}


def infer(model, image, cache_dir, on=True, extra=()):
    proc = run_module("ms_ocr.infer", "--model", "paddleocr-vl", "--model-path", str(model), "--image", str(image),
                      "--task", "ocr", "--max-new-tokens", NEW, "--json", *extra, env=_env(cache_dir, on))
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout.splitlines()[-1])
    return record, proc.stderr


def _manifest(cache_dir):
    (folder,) = [d for d in os.listdir(cache_dir)]
    with open(os.path.join(cache_dir, folder, "manifest.json")) as f:
        return os.path.join(cache_dir, folder), json.load(f)["entries"]


def test_second_process_reads_every_graph_and_answers_the_same(bf16_dir, pages, tmp_path):
    cache = tmp_path / "cache"
    cold, _ = infer(bf16_dir, pages / "a.png", cache)
    folder, entries = _manifest(cache)
    n = len(entries)
    assert n >= 5 and cold["timings"]["compile_cache"] == {"on": True, "loaded": 0, "written": n}
    assert cold["timings"]["kv_cache_dtype"] == "fp32"  # the exact path's cache (the benchmarks' decode bound reads it)
    warm, _ = infer(bf16_dir, pages / "a.png", cache)
    assert warm["token_ids"] == cold["token_ids"]
    assert warm["timings"]["compile_cache"] == {"on": True, "loaded": n, "written": 0}
    assert _manifest(cache)[1] == entries

    # a corrupt entry is compiled again, with a warning, never a crash
    bad = os.path.join(folder, "rank_0", "graph_cache", "compile_cache_1.mindir")
    os.chmod(bad, 0o600)
    with open(bad, "r+b") as f:
        f.seek(100)
        f.write(b"\0garbage\0" * 8)
    again, err = infer(bf16_dir, pages / "a.png", cache)
    assert "compile cache entry 1" in err and "corrupt" in err
    assert again["token_ids"] == cold["token_ids"]
    assert again["timings"]["compile_cache"] == {"on": True, "loaded": n - 1, "written": 1}
    assert [e["graph"] for e in _manifest(cache)[1]] == [e["graph"] for e in entries]

    # another image size: its graphs differ from the stored run's, so the cache steps aside at the first of them
    # (nothing read past it, nothing overwritten) and the answer is the uncached one
    before = _manifest(cache)[1]
    other, _ = infer(bf16_dir, pages / "b.png", cache)
    plain, _ = infer(bf16_dir, pages / "b.png", tmp_path / "unused", on=False)
    assert other["token_ids"] == plain["token_ids"] and "compile_cache" not in plain["timings"]
    assert other["timings"]["compile_cache"]["on"] is False and other["timings"]["compile_cache"]["written"] == 0
    assert _manifest(cache)[1] == before and len(before) == n


def test_other_weights_and_other_keys(bf16_dir, tiny_checkpoint, pages, tmp_path):
    """Graphs hold no weights: a checkpoint changed on disk after caching (same config) answers with its own
    weights. Whatever shapes the graphs (here --dtype fp32: fp32 weights) is part of the folder's key."""
    cache = tmp_path / "cache"
    first, _ = infer(bf16_dir, pages / "c.png", cache)
    changed = tmp_path / "changed"
    shutil.copytree(bf16_dir, changed)
    from tests.helpers.tiny_paddle import make_tiny_checkpoint
    other = make_tiny_checkpoint(str(tmp_path / "seed1"), dtype="bfloat16", seed=1)
    shutil.copy(os.path.join(other, "model.safetensors"), changed / "model.safetensors")
    cached, _ = infer(changed, pages / "c.png", cache)
    plain, _ = infer(changed, pages / "c.png", tmp_path / "unused", on=False)
    assert cached["timings"]["compile_cache"]["loaded"] > 0
    assert cached["token_ids"] == plain["token_ids"] != first["token_ids"]
    fp32, _ = infer(bf16_dir, pages / "c.png", cache, extra=("--dtype", "fp32"))
    assert len(os.listdir(cache)) == 2 and fp32["timings"]["compile_cache"]["loaded"] == 0


def test_two_batch_processes_at_once_over_several_sizes(bf16_dir, pages, tmp_path):
    """Two batch runs start together on an empty cache: one owns it, the other compiles without it; a third run
    reads what the first stored. Every run's records equal the uncached run's, page by page (MindSpore's cache
    alone handed a later run the graphs of the first run's shapes: out-of-range gather indices)."""
    cache = tmp_path / "cache"

    def batch(out, on=True):
        cmd = [sys.executable, "-m", "ms_ocr.batch", "--model", "paddleocr-vl", "--model-path", str(bf16_dir),
               "--input", str(pages), "--out", str(out), "--task", "ocr", "--max-batch-size", "2",
               "--max-output-length", NEW, "--no-progress"]
        env = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3", MS_OCR_OFFLINE="1", **_env(cache, on))
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def tokens(out):
        with open(out / "results.jsonl") as f:
            return {r["key"]: r["token_ids"] for r in map(json.loads, f)}

    runs = [batch(tmp_path / "one"), batch(tmp_path / "two")]
    for p in runs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    plain = batch(tmp_path / "plain", on=False)
    assert plain.wait(600) == 0
    third = batch(tmp_path / "three")
    assert third.wait(600) == 0
    want = tokens(tmp_path / "plain")
    assert len(want) == 3
    for name in ("one", "two", "three"):
        assert tokens(tmp_path / name) == want, name
    _, entries = _manifest(cache)
    assert entries  # stored by whichever of the first two owned the folder


def test_a_folder_that_cannot_be_written_turns_the_cache_off(tmp_path, capsys):
    """A full disk or a read-only folder while a graph is recorded: a warning and no cache from then on, never a
    failed request (the bookkeeping itself, without compiling anything)."""
    from ms_ocr.compile_cache import CompileCache
    cache = CompileCache({"k": 1}, root=str(tmp_path))
    os.makedirs(os.path.join(cache.dir, "rank_0", "graph_cache"))
    cache.enabled = True  # as after activation, without touching this process's MindSpore context
    cache.disable = lambda: setattr(cache, "enabled", False)
    cache.before_compile("g0")
    cache._on_compile()
    with open(cache._file(0), "wb") as f:  # what MindSpore writes for the graph
        f.write(b"graph")

    def full_disk():
        raise OSError(28, "No space left on device")

    cache._write_manifest = full_disk
    cache.safely(cache.after_compile)
    assert cache.enabled is False and "No space left on device" in capsys.readouterr().err
    cache.safely(cache.before_compile, "g1")  # nothing more is read or written
    assert cache._pending is None


def test_only_the_most_recent_folders_are_kept(tmp_path):
    from ms_ocr.compile_cache import _prune
    for i in range(5):
        folder = tmp_path / f"k{i}"
        (folder / "rank_0").mkdir(parents=True)
        (folder / ".lock").write_text("")
        (folder / "rank_0" / "compile_cache_0.mindir").write_bytes(b"x")
        os.chmod(folder / "rank_0" / "compile_cache_0.mindir", 0o400)
        os.utime(folder, (1000 + i, 1000 + i))
    (tmp_path / "notes").mkdir()  # not a cache folder: left alone
    _prune(str(tmp_path), keep=2)
    assert sorted(os.listdir(tmp_path)) == ["k3", "k4", "notes"]


def test_a_page_in_padded_vision_blocks_answers_the_same_with_the_cache(bf16_dir, tmp_path):
    """A page of 34 x 34 = 1,156 patches runs in 3 equal vision blocks of 386 rows (2 padding rows; runtime
    packed_tower): with the cache (writing, then reading) it answers as without it."""
    big = tmp_path / "big"
    shutil.copytree(bf16_dir, big)
    with open(big / "preprocessor_config.json") as f:
        pre = json.load(f)
    pre["max_pixels"] = 28 * 28 * 300  # room for 1,156 patches
    with open(big / "preprocessor_config.json", "w") as f:
        json.dump(pre, f)
    page = tmp_path / "page.png"
    text_page(476, 476, "padded blocks").save(page)
    cache = tmp_path / "cache"
    plain, _ = infer(big, page, tmp_path / "unused", on=False)
    cold, _ = infer(big, page, cache)
    warm, _ = infer(big, page, cache)
    assert warm["timings"]["compile_cache"]["loaded"] == cold["timings"]["compile_cache"]["written"] > 0
    assert cold["token_ids"] == warm["token_ids"] == plain["token_ids"]
    assert plain["timings"]["prompt_tokens"] > 1156 // 4
