"""The document pipeline on a synthetic page drawn from its blocks (header, title, paragraphs, a section title, a
formula, a table, a picture with its caption, a page number) with tiny checkpoints: blocks, reading numbers and JSON; each
region kind recognised as one batch with the same tokens as recognising the region alone; the Markdown assembly;
the command line on images and PDFs, including a page without detections and a corrupt PDF page."""

import json
import os

import numpy as np
import pytest
from PIL import Image, ImageDraw

from ms_ocr.layout import LayoutBlock
from ms_ocr.pipeline import regions
from bench.pages import layout_page

W, H = 768, 1024
# (label, box) in reading order, as a layout model would give them
BLOCKS = [("header", (40, 20, 400, 44)), ("doc_title", (120, 70, 650, 120)), ("text", (60, 140, 710, 260)),
          ("paragraph_title", (60, 280, 300, 310)), ("text", (60, 320, 710, 420)),
          ("display_formula", (200, 440, 560, 500)), ("table", (60, 520, 710, 700)), ("image", (60, 720, 400, 930)),
          ("figure_title", (420, 800, 710, 840)), ("number", (370, 970, 400, 995))]


def draw_page():
    return layout_page(BLOCKS, W, H)


def _blocks():
    return [LayoutBlock(label, 0, 0.9, tuple(float(v) for v in box), i) for i, (label, box) in enumerate(BLOCKS)]


@pytest.fixture(scope="module")
def vlm(graph_mode, tiny_dir):
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from ms_ocr.runtime import Buckets
    return paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64))


@pytest.fixture(scope="module")
def parsed(vlm):
    from ms_ocr import line_reader
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from ms_ocr.pipeline import DocumentPipeline
    batches = []
    original = line_reader.run  # what the pipeline runs a kind's regions through (the engine, lines or not)

    def spy(engine, requests, on_result):
        requests = list(requests)
        batches.append((engine.batch, [r.task for r in requests]))
        return original(engine, requests, on_result)

    line_reader.run = spy
    try:
        # the tiny checkpoint's own image bounds (region_pixels=None) keep its regions small; the bounds PaddleX asks
        # for are test_versions.py's subject
        doc = DocumentPipeline(None, vlm, paddleocr_vl, SamplingConfig(max_new_tokens=6), max_batch_size=8,
                               region_pixels=None)
        page = draw_page()
        result = doc.parse(page, layout_blocks=_blocks())
    finally:
        line_reader.run = original
    return page, result, batches


def test_blocks_json_and_reading_numbers(parsed):
    _, result, _ = parsed
    record = result.as_dict()
    assert (record["width"], record["height"]) == (W, H)
    assert [b["label"] for b in record["blocks"]] == [label for label, _ in BLOCKS]
    assert [b["box"] for b in record["blocks"]] == [list(box) for _, box in BLOCKS]
    # numbered as PaddleX 3.7.2 numbers (result.py): not pictures, tables, captions, headers/footers, nor the labels
    # the Markdown leaves out (PaddleOCR 3.3 numbered the header and the page number: 1 and 7 before 2026-12)
    assert [b["order"] for b in record["blocks"]] == [None, 1, 2, 3, 4, 5, None, None, None, None]
    assert [b["block_id"] for b in record["blocks"]] == list(range(len(BLOCKS)))
    assert [b["group_id"] for b in record["blocks"]] == list(range(len(BLOCKS)))  # nothing merges here
    assert record["pipeline_version"] == "1.0" and all("points" not in b for b in record["blocks"])
    assert record["blocks"][7]["image"] == "imgs/img_in_image_box_60_720_400_930.jpg"
    assert all(b["content"] for b in record["blocks"] if b["label"] != "image")
    assert result.timings["regions"] == {"text": 7, "formula": 1, "table": 1}
    json.dumps(record)


def test_each_kind_is_one_batch_equal_to_single_requests(parsed, vlm):
    """Text regions go through the VLM together (one engine run, 7 slots); every region's tokens equal a
    single-request run on the same crop with its kind's prompt."""
    from ms_ocr.generate import SamplingConfig
    page, result, batches = parsed
    assert batches == [(7, ["ocr"] * 7), (1, ["table"]), (1, ["formula"])]
    prompts = {"text": "OCR:", "table": "Table Recognition:", "formula": "Formula Recognition:"}
    checked = [b for b in result.blocks if b.label in ("doc_title", "display_formula")] + \
        [b for b in result.blocks if b.label == "text"][:1]
    for b in checked:
        region = regions.crop(page, b.box)
        if b.task == "formula":
            region = regions.trim_to_ink(region)
            assert region.size[0] < b.box[2] - b.box[0]  # cut down to the ink
        alone = vlm.run([region], prompts[b.task], SamplingConfig(max_new_tokens=6))
        assert b.content == regions.clean(alone["text"], b.label, b.task)


def test_markdown_assembly(parsed, tmp_path):
    _, result, _ = parsed
    md = result.markdown()
    blocks = result.blocks
    assert md.startswith("# " + blocks[1].content.replace("\n", " ").strip()[:5])
    assert blocks[0].content not in md or not blocks[0].content.strip()  # header left out
    assert "<table border=1" in md or "\n" + blocks[6].content in md
    assert '<img src="imgs/img_in_image_box_60_720_400_930.jpg" alt="Image" width="44%" />' in md
    assert '<div style="text-align: center;">' in md
    title, picture = md.index("## "), md.index("<img")
    formula = md.index("\n\n" + blocks[5].content + "\n\n", title)  # as the recogniser wrote it (no $$ added)
    assert blocks[5].label == "display_formula" and blocks[5].content and md.index("# ") < title < formula < picture
    result.save_pictures(str(tmp_path))
    with Image.open(tmp_path / "imgs" / "img_in_image_box_60_720_400_930.jpg") as pic:
        assert pic.size == (340, 210)
    drawing = result.draw(draw_page())
    assert drawing.size == (W, H) and np.asarray(drawing).std() > 0


@pytest.fixture
def blind_doc(layout_detector, vlm):
    """A pipeline whose detector keeps nothing (threshold above any score)."""
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from ms_ocr.pipeline import DocumentPipeline
    doc = DocumentPipeline(layout_detector, vlm, paddleocr_vl, SamplingConfig(max_new_tokens=4))
    doc.layout_threshold = 1.01  # above any score
    return doc


def test_page_without_detections(blind_doc):
    result = blind_doc.parse(Image.new("RGB", (600, 800), "white"))
    assert result.blocks == [] and result.layout == [] and result.markdown() == ""
    assert "layout_ms" in result.timings and "recognize_text_ms" not in result.timings


def _cli(*args):
    from ms_ocr.pipeline.cli import main
    return main([str(a) for a in args])


def test_cli_image(tiny_dir, layout_dir, layout_detector, vlm, tmp_path, monkeypatch, capsys):
    """Detector + filters + recognition from the command line: files written, JSON blocks are the filtered
    detections in reading order with their text. The loaders hand back the session's compiled tiny models (loading
    is the subject of the model tests) after checking what they were asked to load."""
    from ms_ocr import layout as pp_doclayout_v2
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from ms_ocr.pipeline import layout_filter
    calls = []
    real_load = type(paddleocr_vl).load  # ModelSpec.load: the spec itself is frozen
    monkeypatch.setattr(type(paddleocr_vl), "load", lambda spec, *a, **k: calls.append(a) or vlm
                        if spec is paddleocr_vl else real_load(spec, *a, **k))
    monkeypatch.setattr(pp_doclayout_v2, "LayoutDetector",
                        lambda path, mode: calls.append((path, mode)) or layout_detector)
    detections = []  # the detector's blocks at full precision (page.json rounds boxes and scores, which can tie)
    real_analyze = layout_detector.analyze
    monkeypatch.setattr(layout_detector, "analyze",
                        lambda *a: detections.append(real_analyze(*a)) or detections[-1])
    page = tmp_path / "page.png"
    draw_page().save(page)
    out = tmp_path / "out"
    assert _cli("--image", page, "--out", out, "--model-path", tiny_dir, "--layout-model-path", layout_dir,
                "--max-new-tokens", 3, "--max-batch-size", 16, "--device", "cpu", "--layout-mode", "eager") == 0
    assert sorted(p for p in os.listdir(out) if not os.path.isdir(out / p)) == [".lock", "job.json", "page.json",
                                                                               "page.md", "page_layout.png"]
    record = json.loads((out / "page.json").read_text())
    assert record["layout"], "the tiny random detector finds boxes on the drawn page"
    assert [b.as_dict() for b in detections[0].blocks] == record["layout"]
    kept = layout_filter.filter_blocks(detections[0].blocks, W, H)
    # the version's rules (1.0 for PP-DocLayoutV2); merging may move a picture or table after a text group
    assert sorted((b["label"], tuple(b["box"])) for b in record["blocks"]) == sorted((b.label, b.box) for b in kept)
    assert [d["order"] for d in record["layout"]] == sorted(d["order"] for d in record["layout"])
    for b in record["blocks"]:
        assert ("image" in b) == (regions.region_task(b["label"]) is None)
        if "image" in b:
            assert os.path.isfile(out / b["image"])
    assert set(record["timings"]) >= {"layout_ms", "filter_ms", "crops_ms", "total_ms"}
    assert calls == [(layout_dir, "eager"), (tiny_dir, "CPU", "auto")]
    # a second run of the same job keeps the finished page (batch size and layout mode are not part of a job)
    before = (out / "page.json").stat().st_mtime_ns
    assert _cli("--image", page, "--out", out, "--model-path", tiny_dir, "--layout-model-path", layout_dir,
                "--max-new-tokens", 3) == 0
    assert (out / "page.json").stat().st_mtime_ns == before and "already done" in capsys.readouterr().err
    assert calls[2] == (layout_dir, "eager")  # the default, --layout-mode auto, for one page on the CPU


def test_layout_mode_auto_is_eager_for_a_few_pages_on_the_cpu():
    from ms_ocr.layout.runner import EAGER_BELOW_PAGES, layout_mode_for
    assert EAGER_BELOW_PAGES == 12
    assert [layout_mode_for("auto", "CPU", n) for n in (1, 11, 12, 40)] == ["eager", "eager", "graph", "graph"]
    assert layout_mode_for("auto", "Ascend", 1) == "graph" and layout_mode_for("auto", "CPU", None) == "graph"
    assert layout_mode_for("graph", "CPU", 1) == "graph" and layout_mode_for("eager", "Ascend", 40) == "eager"


def test_cli_pdf_with_a_corrupt_page(blind_doc, tiny_dir, layout_dir, tmp_path, monkeypatch, capsys):
    """Every page is written as it finishes; a page that cannot be loaded (its page-tree entry points at an image
    object) is recorded with its error and the exit status says so; run again on the repaired file, the finished
    page is kept and only the other one is parsed. (The loaded models are the fixture's: loading is
    test_cli_image's business.)"""
    import io
    from ms_ocr.pipeline import cli
    buf = io.BytesIO()
    first = Image.new("RGB", (612, 792), "white")
    ImageDraw.Draw(first).text((100, 100), "Page one", fill="black")
    first.save(buf, "PDF", save_all=True, append_images=[Image.new("RGB", (612, 792), "white")], resolution=72)
    good = buf.getvalue()
    kids = b"/Kids [ 1 0 R 3 0 R ]"
    assert good.count(kids) == 1 and b"7 0 obj" in good and b"/Subtype /Image" in good
    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(good.replace(kids, b"/Kids [ 1 0 R 7 0 R ]"))  # page 2 -> an image XObject
    todo = []  # pages each run has left to parse (what --layout-mode auto decides by)
    monkeypatch.setattr(cli, "load", lambda args, pages: todo.append(pages) or blind_doc)
    out = tmp_path / "out"
    ckpts = ("--model-path", tiny_dir, "--layout-model-path", layout_dir)
    code = _cli("--pdf", pdf, "--out", out, "--dpi", 72, *ckpts)
    assert code == 3  # a page failed; the rest is written
    record = json.loads((out / "doc.json").read_text())
    assert [p["page"] for p in record["pages"]] == [1, 2]
    assert "error" not in record["pages"][0] and "page 2 cannot be rendered" in record["pages"][1]["error"]
    assert (out / "doc_page1_layout.png").is_file() and (out / "doc.md").is_file()
    assert "page 2 cannot be rendered" in capsys.readouterr().err
    assert record["pages"][0]["blocks"] == [] and (out / "doc.md").read_text() == "\n"
    # run again on the repaired file: page 1 is kept from the first run, page 2 is parsed now
    pdf.write_bytes(good)
    parsed = []
    monkeypatch.setattr(blind_doc, "parse", lambda page, _parse=blind_doc.parse: parsed.append(page) or _parse(page))
    assert _cli("--pdf", pdf, "--out", out, "--dpi", 72, *ckpts) == 0
    assert len(parsed) == 1 and "1 page(s) already done" in capsys.readouterr().err
    assert todo == [2, 1]
    record = json.loads((out / "doc.json").read_text())
    assert [p["page"] for p in record["pages"]] == [1, 2] and all("error" not in p for p in record["pages"])


def _outputs(out):
    return sorted(p for p in os.listdir(out) if not p.startswith("."))


def test_cli_inputs_with_the_same_name_keep_their_own_results(blind_doc, tiny_dir, layout_dir, tmp_path,
                                                               monkeypatch, capsys):
    """`dA/page.png dB/page.png` reported 2 pages and kept one (both wrote page.json). Each input now owns a name
    (page, page-2, ...) recorded by its JSON's source, and keeps it in later runs."""
    from ms_ocr.pipeline import cli
    monkeypatch.setattr(cli, "load", lambda args, pages: blind_doc)
    paths = [tmp_path / "dA" / "page.png", tmp_path / "dB" / "page.png", tmp_path / "dA" / "page.jpg"]
    for i, path in enumerate(paths):
        path.parent.mkdir(exist_ok=True)
        Image.new("RGB", (200 + 10 * i, 300), "white").save(path)
    out = tmp_path / "out"
    ckpts = ("--model-path", tiny_dir, "--layout-model-path", layout_dir)
    assert _cli("--image", *paths, "--out", out, *ckpts) == 0
    names = ["page", "page-2", "page-3"]
    assert _outputs(out) == sorted(["job.json"] + [n + e for n in names for e in (".json", ".md", "_layout.png")])
    for name, path in zip(names, paths):
        record = json.loads((out / f"{name}.json").read_text())
        assert record["source"] == str(path) and record["width"] == Image.open(path).width
    capsys.readouterr()
    # a later run of dB/page.png alone finds its results under page-2; a new input takes the next free name
    (tmp_path / "dC").mkdir()
    Image.new("RGB", (90, 90), "white").save(tmp_path / "dC" / "page.png")
    assert _cli("--image", paths[1], tmp_path / "dC" / "page.png", "--out", out, *ckpts) == 0
    assert f"{paths[1]}: already done" in capsys.readouterr().err
    assert json.loads((out / "page-4.json").read_text())["source"] == str(tmp_path / "dC" / "page.png")
    assert json.loads((out / "page.json").read_text())["source"] == str(paths[0])


def test_cli_name_not_utf8(blind_doc, tiny_dir, layout_dir, tmp_path, monkeypatch):
    """Such a name failed the page ('surrogates not allowed') and left page.json.tmp behind."""
    from ms_ocr.pipeline import cli
    monkeypatch.setattr(cli, "load", lambda args, pages: blind_doc)
    path = os.path.join(os.fsencode(tmp_path), b"r\xe9sum\xe9.png")
    Image.new("RGB", (120, 160), "white").save(path)
    out = tmp_path / "out"
    assert _cli("--image", os.fsdecode(path), "--out", out, "--model-path", tiny_dir, "--layout-model-path",
                layout_dir) == 0
    files = sorted(os.listdir(os.fsencode(out)))
    assert files == [b".lock", b"job.json", b"r%E9sum%E9.json", b"r%E9sum%E9.md", b"r%E9sum%E9_layout.png"]
    text = (out / "r%E9sum%E9.json").read_bytes().decode("utf-8")
    assert os.fsencode(json.loads(text)["source"]) == path and "\\udce9" in text


def test_cli_another_job_is_refused(blind_doc, tiny_dir, layout_dir, tmp_path, monkeypatch, capsys):
    from ms_ocr.pipeline import cli
    monkeypatch.setattr(cli, "load", lambda args, pages: blind_doc)
    page = tmp_path / "page.png"
    Image.new("RGB", (120, 160), "white").save(page)
    out = tmp_path / "out"
    ckpts = ("--model-path", tiny_dir, "--layout-model-path", layout_dir)
    assert _cli("--image", page, "--out", out, *ckpts) == 0
    before = (out / "page.json").read_bytes()
    capsys.readouterr()
    assert _cli("--image", page, "--out", out, *ckpts, "--charts", "--max-new-tokens", 9) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {out} holds the results of another job (charts false -> true; max_new_tokens 4096 -> "
                   "9); use another --out, or --overwrite to replace them"), err
    assert (out / "page.json").read_bytes() == before
    with open(out / ".lock") as holder:  # a run in progress
        import fcntl
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        assert _cli("--image", page, "--out", out, *ckpts) == 2
        assert "is in use by another run" in capsys.readouterr().err
    assert _cli("--image", page, "--out", out, *ckpts, "--charts", "--overwrite") == 0
    assert json.loads((out / "job.json").read_text())["identity"]["charts"] is True
    assert "already done" not in capsys.readouterr().err


def test_cli_pdf_page_over_the_pixel_limit(blind_doc, tiny_dir, layout_dir, tmp_path, monkeypatch):
    """A 200-inch PDF page is rendered at the DPI that fits the image pixel limit; the page record says which."""
    from ms_ocr.pipeline import cli
    monkeypatch.setattr(cli, "load", lambda args, pages: blind_doc)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500_000)
    Image.new("RGB", (200, 100), "white").save(tmp_path / "huge.pdf", resolution=1.0)  # 14,400 x 7,200 pt
    out = tmp_path / "out"
    assert _cli("--pdf", tmp_path / "huge.pdf", "--out", out, "--model-path", tiny_dir, "--layout-model-path",
                layout_dir) == 0
    (page,) = json.loads((out / "huge.json").read_text())["pages"]
    assert page["width"] * page["height"] <= 1_000_000 and page["dpi"] == pytest.approx(
        72 * page["width"] / 14400, abs=0.01) and page["dpi"] < 200


@pytest.mark.parametrize("args, message", [
    (["--image", "missing.png"], "image file not found"),
    (["--pdf", "{tmp}/broken.pdf"], "not a readable PDF"),
    (["--pdf", "{tmp}/ok.pdf", "--pages", "3"], "outside the document's pages 1-1"),
    (["--image", "{tmp}/ok.png", "--pages", "1"], "--pages applies to --pdf"),
    (["--image", "{tmp}/ok.png", "--recognizer", "nope"], "invalid choice"),
    (["--image", "{tmp}/ok.png", "--bogus"], "unrecognized arguments"),
])
def test_cli_bad_input_is_one_line(tmp_path, capsys, args, message):
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4\nnot a pdf\n")
    Image.new("RGB", (50, 50), "white").save(tmp_path / "ok.pdf")
    Image.new("RGB", (50, 50), "white").save(tmp_path / "ok.png")
    code = _cli(*[a.format(tmp=tmp_path) for a in args], "--out", tmp_path / "out")
    err = capsys.readouterr().err
    assert code in (1, 2) and message in err and len(err.strip().splitlines()) == 1


def test_cli_missing_layout_weights_says_how_to_get_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MS_OCR_HOME", str(tmp_path / "home"))
    Image.new("RGB", (50, 50), "white").save(tmp_path / "ok.png")
    assert _cli("--image", tmp_path / "ok.png", "--out", tmp_path / "out") == 1
    err = capsys.readouterr().err.strip()
    assert "PaddlePaddle/PP-DocLayoutV2_safetensors" in err and "--layout-model-path" in err
    assert len(err.splitlines()) == 1


def test_hunyuan_as_recognizer(hunyuan_checkpoint, graph_mode):
    """--recognizer hunyuan-ocr: the same regions with HunyuanOCR's own prompts; tokens equal its single runs."""
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.models.hunyuan_vl import SPEC as hunyuan_vl
    from ms_ocr.pipeline import DocumentPipeline
    from ms_ocr.runtime import Buckets
    vlm = hunyuan_vl.load(hunyuan_checkpoint(), "CPU", "auto", Buckets(prefill=32, slots=64))
    doc = DocumentPipeline(None, vlm, hunyuan_vl, SamplingConfig(max_new_tokens=5))
    page = draw_page()
    result = doc.parse(page, layout_blocks=[b for b in _blocks() if b.label in ("doc_title", "table")])
    assert [(b.label, b.task) for b in result.blocks] == [("doc_title", "text"), ("table", "table")]
    for b, prompt in zip(result.blocks, ("提取图中的文字。", "把图中的表格解析为HTML。")):
        alone = vlm.run([regions.crop(page, b.box)], prompt, SamplingConfig(max_new_tokens=5))
        assert b.content == regions.clean(alone["text"], b.label, b.task) and len(alone["token_ids"]) > 0


def test_cli_images_are_read_one_at_a_time_and_a_bad_one_is_its_pages_error(blind_doc, tiny_dir, layout_dir,
                                                                              tmp_path, monkeypatch, capsys):
    """`--image` decoded every image before the first page (eight 8000x8000 PNGs held 2.5 GB) and one unreadable
    image ended the run with nothing written. Now each is read when its page starts, and a bad one is recorded."""
    from ms_ocr.pipeline import cli
    from ms_ocr.processing import image as image_module
    monkeypatch.setattr(cli, "load", lambda args, pages: blind_doc)
    paths = [tmp_path / f"{n}.png" for n in ("first", "bad", "last")]
    for p in paths:
        Image.new("RGB", (120, 160), "white").save(p)
    whole = paths[1].read_bytes()
    paths[1].write_bytes(whole[:len(whole) // 2])
    events = []
    real_load, real_parse = image_module.load_image, blind_doc.parse
    monkeypatch.setattr(image_module, "load_image", lambda path: events.append(("load", str(path))) or real_load(path))
    monkeypatch.setattr(blind_doc, "parse", lambda page: events.append(("parse",)) or real_parse(page))
    out = tmp_path / "out"
    assert _cli("--image", *paths, "--out", out, "--model-path", tiny_dir, "--layout-model-path", layout_dir) == 3
    assert events == [("load", str(paths[0])), ("parse",), ("load", str(paths[1])), ("load", str(paths[2])),
                      ("parse",)]
    assert "error" not in json.loads((out / "first.json").read_text())
    assert "truncated or corrupt" in json.loads((out / "bad.json").read_text())["error"]
    assert "error" not in json.loads((out / "last.json").read_text()) and (out / "last.md").is_file()
    assert "bad" in capsys.readouterr().err


def test_overwrite_removes_only_what_the_pipeline_wrote(tmp_path):
    """--overwrite removed the whole OUT/imgs/ (a user's holiday.jpg with it); now only what the records name."""
    from ms_ocr.pipeline.outputs import remove_outputs, write
    out = tmp_path / "out"
    (out / "imgs" / "page").mkdir(parents=True)
    pic = "imgs/page/img_in_image_box_1_2_3_4.jpg"
    write(out, "page", {"source": str(tmp_path / "page.png"),
                        "blocks": [{"image": pic}, {"image": "../holiday.jpg"}, {"image": "imgs/../../x"}]}, "text")
    write(out, "doc", {"source": str(tmp_path / "doc.pdf"), "pages": [{"page": 1, "blocks": []}, {"page": 2}]}, "")
    for name in (pic, "page_layout.png", "doc_page1_layout.png", "doc_page2_layout.png"):
        (out / name).write_bytes(b"ours")
    mine = ["imgs/holiday.jpg", "imgs/page/mine.jpg", "holiday.jpg", "notes.md", "doc_page3_notes_layout.png"]
    for name in mine:
        (out / name).write_bytes(b"mine")
    remove_outputs(str(out))
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert left == sorted(mine)
