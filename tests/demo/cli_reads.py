"""Held-out images read through the CLI's demo fallback (no --model, an empty weights cache): the accuracy gates'
one `infer` run per mode."""

import json
import os

from ms_ocr.ops import native
from tests.cli_util import run_module


def read_sets(tmp, sets, max_new_tokens, *options):
    """{name: [image, ...]} -> {name: [CLI record, ...]} from one `infer --json` run with `options`, images saved in
    folder `tmp`."""
    paths = {name: [] for name in sets}
    for name, images in sets.items():
        for i, img in enumerate(images):
            paths[name].append(str(tmp / f"{name}_{i:03d}.png"))
            img.save(paths[name][-1])
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
