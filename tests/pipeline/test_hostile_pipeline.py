"""Pipeline runs a careless user makes (issue 76): rerun into the input folder, a recogniser whose context is the
default token budget. Each test failed on the code before (2026-12-06)."""

import json

from PIL import Image

from tests.pipeline.test_pipeline import _cli, blind_doc, draw_page, parsed, vlm  # noqa: F401 - fixtures


def test_a_rerun_into_the_input_folder_does_not_read_its_own_drawings(blind_doc, tiny_dir, layout_dir,  # noqa: F811
                                                                      tmp_path, monkeypatch, capsys):
    """`--image dir/*.png --out dir` a second time read dir/page_layout.png, the first run's drawing, as a page."""
    from ms_ocr.pipeline import cli
    monkeypatch.setattr(cli, "load", lambda args, pages: blind_doc)
    folder = tmp_path / "scans"
    folder.mkdir()
    Image.new("RGB", (120, 160), "white").save(folder / "page.png")
    common = ("--out", folder, "--model-path", tiny_dir, "--layout-model-path", layout_dir)
    assert _cli("--image", folder / "page.png", *common) == 0
    assert (folder / "page_layout.png").is_file()
    capsys.readouterr()
    pngs = sorted(folder.glob("*.png"))  # what the shell gives for scans/*.png now
    assert [p.name for p in pngs] == ["page.png", "page_layout.png"]
    assert _cli("--image", *pngs, *common) == 0
    err = capsys.readouterr().err
    assert "page_layout.png was written by an earlier pipeline run" in err
    assert not (folder / "page_layout.json").exists() and not (folder / "page_layout_layout.png").exists()
    assert _cli("--image", folder / "page_layout.png", *common) == 2  # nothing else to read: one line


def test_the_default_token_budget_fits_a_recogniser_of_that_context(vlm, monkeypatch):  # noqa: F811
    """With a recogniser of 4,096 positions the default --max-new-tokens 4096 failed every page (prompt + 4096
    over the context); the budget is now cut to what the region's prompt leaves."""
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from ms_ocr.pipeline import DocumentPipeline
    from tests.pipeline.test_pipeline import _blocks
    monkeypatch.setattr(vlm.runtime, "max_positions", 128)  # a context as long as the budget below
    # the tiny checkpoint's own image bounds: its regions' prompts fit the 64 positions (PaddleX's bounds, the
    # default since 2026-12, make them 200 tokens and more)
    doc = DocumentPipeline(None, vlm, paddleocr_vl, SamplingConfig(max_new_tokens=128), max_batch_size=8,
                           region_pixels=None)
    result = doc.parse(draw_page(), layout_blocks=_blocks())
    read = [b for b in result.blocks if b.task is not None]
    assert read and all(b.error is None for b in read), [b.error for b in read]


def test_the_cli_default_budget_is_none_until_the_recogniser_is_known():
    from ms_ocr.pipeline.cli import REGION_TOKENS, build_parser
    args = build_parser().parse_args(["--image", "x.png", "--out", "o"])
    assert args.max_new_tokens is None and REGION_TOKENS == 4096


def test_pipeline_job_identity_has_the_precision_options(tiny_dir, layout_dir, tmp_path):
    """A rerun with --quantize int8 into the same --out resumed on the exact path's pages."""
    from ms_ocr.pipeline.cli import build_parser, job_identity
    base = ["--image", "x.png", "--out", str(tmp_path), "--model-path", tiny_dir, "--layout-model-path", layout_dir]
    assert "quantize" not in job_identity(build_parser().parse_args(base))
    assert job_identity(build_parser().parse_args(base + ["--quantize", "int8-g64"]))["quantize"] == "int8-g64"
