"""Held-out images read through the CLI's demo fallback (no --model, an empty weights cache): the accuracy gates'
one `infer` run per mode; or through the batch runner on the demo checkpoint."""

import json
import os

from ms_ocr.ops import native
from tests.cli_util import run_module


def _save(folder, sets):
    """{name: [image, ...]} saved as folder/<name>_<i>.png: {name: [path, ...]}."""
    paths = {name: [str(folder / f"{name}_{i:03d}.png") for i in range(len(images))] for name, images in sets.items()}
    for name, images in sets.items():
        for path, img in zip(paths[name], images):
            img.save(path)
    return paths


def read_sets(tmp, sets, max_new_tokens, *options):
    """{name: [image, ...]} -> {name: [CLI record, ...]} from one `infer --json` run with `options`, images saved in
    folder `tmp`."""
    paths = _save(tmp, sets)
    every = [p for name in sets for p in paths[name]]
    home = tmp / "empty_cache"  # no weights; the native kernels this machine has built already (a build is ~8 s)
    home.mkdir()
    kernels = native.cache_dir()
    os.makedirs(kernels, exist_ok=True)
    os.symlink(kernels, home / "kernels")
    proc = run_module("ms_ocr.infer", "--image", *every, "--json", "--max-new-tokens", str(max_new_tokens), *options,
                      env={"MS_OCR_HOME": str(home), "OMP_NUM_THREADS": "2"})
    assert proc.returncode == 0, proc.stderr
    assert "built-in demo model" in proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["image"] for r in records] == every
    records = iter(records)
    return {name: [next(records) for _ in paths[name]] for name in sets}


def read_sets_batched(tmp, sets, max_new_tokens, batch_size, *options):
    """{name: [image, ...]} -> {name: [batch record, ...]} from one `python -m ms_ocr.batch` run over the demo
    checkpoint with `options`, `batch_size` sequences decoded together (its continuous batching)."""
    from ms_ocr.models import demo_checkpoint

    folder = tmp / "images"
    folder.mkdir()
    names = {name: [os.path.basename(p) for p in paths] for name, paths in _save(folder, sets).items()}
    out = tmp / "out"
    proc = run_module("ms_ocr.batch", "--model", "paddleocr-vl", "--model-path", demo_checkpoint(), "--input",
                      str(folder), "--out", str(out), "--task", "ocr", "--max-batch-size", str(batch_size),
                      "--max-output-length", str(max_new_tokens), "--no-progress", *options,
                      env={"OMP_NUM_THREADS": "2"})
    assert proc.returncode == 0, proc.stderr
    with open(out / "results.jsonl", encoding="utf-8") as f:
        got = {os.path.basename(r["source"]): r for r in map(json.loads, f)}
    assert sorted(got) == sorted(file for files in names.values() for file in files)
    return {name: [got[file] for file in files] for name, files in names.items()}
