"""Batch and pipeline runs that must not damage a user's files or run away (issue 76): a results.jsonl or a
report.csv that another program wrote, hidden files taken for pages, precision options left out of a job's
identity, a poster-sized PDF page, unbounded batch sizes, a pipeline rerun reading its own drawings. Each test
failed on the code before (2026-12-06)."""

import json
import os

import pytest
from PIL import Image

from ms_ocr.batch import inputs as I
from tests.batch.test_batch_jobs import _batch, pages  # noqa: F401 - pages is a fixture
from tests.cli_util import assert_one_line_error, run_module


def test_a_foreign_results_jsonl_is_refused_and_left_untouched(tiny_dir, pages, tmp_path):  # noqa: F811
    """It was "taken as this job's", rewritten (a non-JSON line dropped, "job" added to every object), then the
    run failed with KeyError: 'key' on every attempt."""
    out = tmp_path / "out"
    out.mkdir()
    theirs = '{"id": 1, "label": "cat"}\nnot json at all\n{"id": 2}\n'
    (out / "results.jsonl").write_text(theirs)
    proc = _batch(tiny_dir, out, str(pages))
    assert_one_line_error(proc, "holds files this tool did not write", "results.jsonl: line 1 has no str \"key\"")
    assert (out / "results.jsonl").read_text() == theirs and not (out / "job.json").exists()
    proc = _batch(tiny_dir, out, str(pages), extra=("--overwrite",))  # not even --overwrite removes them
    assert proc.returncode == 2 and (out / "results.jsonl").read_text() == theirs


def test_a_users_report_csv_is_not_appended_to(tiny_dir, pages, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.csv").write_text("name,total\nrent,900\n")
    proc = _batch(tiny_dir, out, str(pages))
    assert_one_line_error(proc, "report.csv: its first line is not this tool's header")
    assert (out / "report.csv").read_text() == "name,total\nrent,900\n"


def test_our_own_report_is_appended_with_one_header(tiny_dir, pages, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    assert _batch(tiny_dir, out, str(pages)).returncode == 0
    assert _batch(tiny_dir, out, str(pages)).returncode == 0  # resumed: nothing to do, a second row
    lines = (out / "report.csv").read_text().splitlines()
    assert len(lines) == 3 and lines[0].startswith("pages,ok,failed") and not lines[2].startswith("pages")


def test_hidden_files_and_folders_are_not_pages(tmp_path):
    """macOS's ._scan.png resource forks and images under .git/ were read as pages."""
    folder = tmp_path / "scans"
    (folder / ".git" / "objects").mkdir(parents=True)
    (folder / "sub").mkdir()
    for path in ("a.png", "._a.png", ".hidden.png", ".git/objects/logo.png", "sub/b.png", "sub/.~lock.png"):
        Image.new("RGB", (8, 8)).save(folder / path)
    assert [os.path.relpath(i.source, folder) for i in I.collect([str(folder)])] == ["a.png", "sub/b.png"]
    assert len(I.collect([str(folder / "._a.png")])) == 1  # named explicitly, a file is read


def test_precision_options_are_part_of_a_batch_job(tiny_dir):
    """A rerun with --quantize int8 into the same --out resumed on the exact path's results."""
    from ms_ocr.batch.cli import build_parser, job_identity
    from ms_ocr.batch.job import differences

    def identity(*extra):
        args = build_parser().parse_args(["--model", "paddleocr-vl", "--input", "x", "--out", "o", *extra])
        return job_identity(args, "paddleocr_vl", tiny_dir, "OCR:", "ocr")

    exact = identity()
    assert "quantize" not in exact and "kv_cache_dtype" not in exact  # the folders of earlier runs stay theirs
    assert differences(exact, identity("--quantize", "int8")) == ['quantize null -> "int8"']
    assert differences(exact, identity("--kv-cache-dtype", "bf16")) == ['kv_cache_dtype null -> "bf16"']
    assert differences(exact, identity("--dtype", "bf16")) == ['dtype null -> "bf16"']
    assert identity("--dtype", "fp32") == exact


def test_a_poster_sized_pdf_page_is_rendered_within_the_page_cap(tmp_path):
    """A 200-inch page at 200 DPI rendered within the image-file limit (~179 Mpx: ~1.7 GB in flight per page);
    pages are now capped at PDF_PAGE_PIXELS, more than any model reads."""
    Image.new("RGB", (200, 200), "white").save(tmp_path / "poster.pdf", resolution=1.0)  # 14,400 pt square
    img = I.render_pdf_page(str(tmp_path / "poster.pdf"), 1, 200)
    assert img.width * img.height <= I.PDF_PAGE_PIXELS and img.width * img.height > 0.99 * I.PDF_PAGE_PIXELS
    assert I.page_dpi(img) < 200


@pytest.mark.parametrize("module,flag", [("ms_ocr.batch", "--max-batch-size"), ("ms_ocr.serve", "--max-num-seqs"),
                                         ("ms_ocr.pipeline", "--max-batch-size")])
def test_batch_sizes_are_bounded(module, flag, tmp_path):
    """--max-batch-size 2000 took 9 GB in 12 s for 4 images."""
    args = {"ms_ocr.batch": ["--model", "paddleocr-vl", "--input", str(tmp_path), "--out", str(tmp_path / "o")],
            "ms_ocr.serve": ["--model", "paddleocr-vl"],
            "ms_ocr.pipeline": ["--image", "x.png", "--out", str(tmp_path / "o")]}[module]
    assert_one_line_error(run_module(module, *args, flag, "2000"), f"{flag} must be in 1..256, not 2000")


def test_a_kv_cache_larger_than_the_memory_is_refused(tiny_dir, graph_mode, monkeypatch):
    from ms_ocr import engine as E
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.models.paddleocr_vl import SPEC
    pipe = SPEC.load(tiny_dir, "CPU", "auto")
    need = pipe.runtime.cache_bytes(4, pipe.runtime.plan_slots(64, 64))
    assert need > 0
    monkeypatch.setattr(E, "available_bytes", lambda: need)  # 80 % of it is less than the cache
    with pytest.raises(ValueError, match="KV cache for 4 sequences"):
        E.BatchEngine(pipe, SamplingConfig(), 4, 64, 64)
    monkeypatch.setattr(E, "available_bytes", lambda: 2 * need)
    E.BatchEngine(pipe, SamplingConfig(), 4, 64, 64)


def test_more_threads_than_cores_are_clamped(capsys):
    from ms_ocr.cli import usable_cores
    from ms_ocr.infer import build_parser
    args = build_parser().parse_args(["--image", "x.png", "--threads", "1000"])
    assert args.threads == usable_cores()
    assert f"--threads 1000 is more than the {usable_cores()} cores" in capsys.readouterr().err
