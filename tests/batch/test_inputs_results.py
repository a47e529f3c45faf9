"""Batch inputs (folders, PDFs, manifests, sharding) and the results store (torn lines, resume, merge), no model."""

import json
import os

import numpy as np
import pytest
from PIL import Image

from ms_ocr.batch import inputs as I
from ms_ocr.batch import results as R


@pytest.fixture
def tree(tmp_path):
    Image.new("RGB", (40, 30), "white").save(tmp_path / "b.png")
    (tmp_path / "a").mkdir()
    Image.new("RGB", (40, 30), "white").save(tmp_path / "a" / "z.JPG")
    pages = [Image.new("RGB", (50, 70), c) for c in ("white", "gray", "black")]
    pages[0].save(tmp_path / "a" / "doc.pdf", save_all=True, append_images=pages[1:])
    (tmp_path / "notes.txt").write_text("ignored")
    return tmp_path


def test_collect_orders_and_expands(tree):
    items = I.collect([str(tree)])
    t = str(tree)
    assert [i.key for i in items] == [f"{t}/a/doc.pdf#1", f"{t}/a/doc.pdf#2", f"{t}/a/doc.pdf#3", f"{t}/a/z.JPG",
                                      f"{t}/b.png"]
    assert [i.page for i in items[:3]] == [1, 2, 3]
    img = I.load(items[1], dpi=144)  # 50x70 pt at 144 dpi
    assert img.size == (100, 140) and img.getpixel((50, 70)) == (128, 128, 128)
    # duplicates (a file named twice) keep their first occurrence
    assert len(I.collect([str(tree), f"{t}/b.png"])) == 5


def test_manifest(tree):
    m = tree / "m.jsonl"
    m.write_text('{"image": "b.png", "task": "table"}\n\n{"image": "b.png", "prompt": "Read it."}\n'
                 '{"image": "a/doc.pdf"}\n')
    items = I.read_manifest(str(m))
    assert [(i.task, i.prompt, i.page) for i in items] == [("table", None, 0), (None, "Read it.", 0), (None, None, 1),
                                                           (None, None, 2), (None, None, 3)]
    assert items[0].key.endswith("b.png@table") and "@prompt-" in items[1].key
    m.write_text('{"image": "b.png", "task": "x", "prompt": "y"}\n')
    with pytest.raises(I.InputError, match="either task or prompt"):
        I.read_manifest(str(m))
    # fields of the wrong type were an AttributeError / TypeError deep inside the run
    for line, field in (('{"image": "b.png", "prompt": 5}', "prompt"), ('{"image": "b.png", "task": ["ocr"]}', "task")):
        m.write_text(line + "\n")
        with pytest.raises(I.InputError, match=f'line 1: "{field}" must be a string'):
            I.read_manifest(str(m))


def test_shard_is_a_partition():
    items = list(range(11))
    parts = [I.shard(items, r, 3) for r in range(3)]
    assert sorted(sum(parts, [])) == items and [len(p) for p in parts] == [4, 4, 3]
    with pytest.raises(I.InputError):
        I.shard(items, 3, 3)


def test_store_survives_a_torn_line_and_resumes(tmp_path):
    path = str(tmp_path / "results.jsonl")
    store = R.ResultStore(path)
    store.append({"key": "a", "source": "a", "page": 0, "ok": True, "text": "A"})
    store.append({"key": "b", "source": "b", "page": 0, "ok": False, "error": "bad"})
    store.close()
    with open(path, "a") as f:
        f.write('{"key": "c", "ok": tr')  # killed mid-write
    store = R.ResultStore(path)
    assert set(store.done) == {"a"}  # the failure is retried, the torn record is gone
    store.append({"key": "b", "source": "b", "page": 0, "ok": True, "text": "B"})
    store.close()
    recs = R.read_records(path)
    assert [r["key"] for r in recs] == ["a", "b", "b"] and R.latest(recs)["b"]["ok"]


def test_merge_waits_for_every_rank(tmp_path):
    out = str(tmp_path)
    for rank, keys in ((0, ["x#1", "y"]), (1, ["x#2"])):
        store = R.ResultStore(os.path.join(out, R.shard_name(rank, 2)))
        for k in keys:
            src, _, page = k.partition("#")
            store.append({"key": k, "source": src, "page": int(page or 0), "ok": True, "text": k})
        store.close()
        if rank == 0:
            open(store.path + ".done", "w").close()
            assert R.merge_shards(out, 2) is None  # rank 1 still running
    open(os.path.join(out, R.shard_name(1, 2) + ".done"), "w").close()
    merged = R.merge_shards(out, 2)
    assert [json.loads(line)["key"] for line in open(merged)] == ["x#1", "x#2", "y"]
    paths = R.write_markdown(out, R.read_records(merged))
    cwd = os.getcwd().lstrip("/").replace("/", "+")
    assert sorted(os.path.basename(p) for p in paths) == [f"{cwd}+x.md", f"{cwd}+y.md"]
    assert open(os.path.join(out, "markdown", f"{cwd}+x.md")).read() == \
        "<!-- page 1 -->\nx#1\n\n<!-- page 2 -->\nx#2\n"


def test_output_names_are_unique_and_safe():
    """Markdown names collided (a/scan.png and a/scan.jpg, a/x/y.png and a/x_y.png all gave a_scan / a_x_y)."""
    from ms_ocr.batch.names import path_name
    cwd = os.getcwd().lstrip("/").replace("/", "+")
    pairs = [("a/scan.png", "a/scan.jpg"), ("a/x/y.png", "a/x_y.png"), ("a/b+c.png", "a/b/c.png"),
             ("a/~2F.png", "a//.png"), ("x.png", "/x.png")]
    for left, right in pairs:
        assert path_name(left) != path_name(right), (left, right)
    assert path_name("a/x/y.png") == f"{cwd}+a+x+y.png" and path_name("a/x_y.png") == f"{cwd}+a+x_y.png"
    assert path_name(os.fsdecode(b"/d/r\xe9sum\xe9.png")) == "d+r~E9sum~E9.png"
    assert path_name("/d/.hidden.png") == "d+.hidden.png" and path_name("/.x") == "~2Ex"  # no hidden file
    assert path_name("/d/été 1.png") == "d+été 1.png"  # valid UTF-8 stays readable
    long_a, long_b = "/d/" + "a" * 300 + "1.png", "/d/" + "a" * 300 + "2.png"
    assert path_name(long_a) != path_name(long_b) and len(path_name(long_a).encode()) <= 200
    assert path_name(long_a).endswith("a1.png") and path_name(long_a) == path_name(long_a)


def test_json_and_display_of_names_that_are_not_utf8():
    from ms_ocr.batch.names import display, to_json
    name = os.fsdecode(b"/d/r\xe9sum\xe9.png")
    line = to_json({"source": name, "text": "été 漢字"})
    assert line == '{"source": "/d/r\\udce9sum\\udce9.png", "text": "été 漢字"}'
    line.encode("utf-8")  # valid UTF-8 (raised before: surrogates not allowed)
    assert os.fsencode(json.loads(line)["source"]) == b"/d/r\xe9sum\xe9.png"
    assert display(name) == "/d/r\\xe9sum\\xe9.png" and display("été") == "été"


def test_markdown_of_colliding_documents(tmp_path):
    records = [{"key": s, "source": s, "page": 0, "ok": True, "text": s}
               for s in ("a/scan.png", "a/scan.jpg", "a/x/y.png", "a/x_y.png")]
    paths = R.write_markdown(str(tmp_path), records)
    assert len(set(paths)) == 4 and sorted(open(p).read() for p in paths) == sorted(s + "\n" for s in
                                                                                  ("a/scan.png", "a/scan.jpg",
                                                                                   "a/x/y.png", "a/x_y.png"))


def test_empty_folder_and_empty_manifest(tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "sub" / "notes.txt").write_text("x")
    with pytest.raises(I.InputError, match="has no images or PDFs"):
        I.collect([str(tmp_path / "empty")])
    (tmp_path / "m.jsonl").write_text("\n\n")
    with pytest.raises(I.InputError, match="lists no images"):
        I.collect([str(tmp_path / "m.jsonl")])


def test_manifest_that_is_not_utf8_names_the_line(tree):
    m = tree / "m.jsonl"
    m.write_bytes(b'{"image": "b.png"}\n{"image": "r\xe9sum\xe9.png"}\n')
    with pytest.raises(I.InputError) as info:
        I.read_manifest(str(m))
    assert str(info.value).startswith(f"{m} line 2: not UTF-8 text (byte 0xe9 at offset 12)")
    # the escape results.jsonl writes for such a name reads back as the same file
    odd = os.path.join(os.fsencode(tree), b"r\xe9sum\xe9.png")
    Image.new("RGB", (8, 8)).save(odd)
    m.write_text('\ufeff{"image": "r\\udce9sum\\udce9.png"}\r\n', encoding="utf-8")  # BOM and CRLF are fine
    (item,) = I.read_manifest(str(m))
    assert os.fsencode(item.source) == odd and I.load(item, 72).size == (8, 8)


def test_pdf_pages_are_capped_at_the_image_pixel_limit(tmp_path, monkeypatch):
    """A 2 KB PDF with a 200-inch page rasterised to 40,000 x 40,000 px at 200 DPI; now the DPI is lowered for
    that page so it stays within the pixel limit image files have, and the DPI used is recorded."""
    Image.new("RGB", (200, 100), "white").save(tmp_path / "huge.pdf", resolution=1.0)  # 14,400 x 7,200 pt
    assert os.path.getsize(tmp_path / "huge.pdf") < 4096
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000_000)  # the default (89 M) works the same, slower
    from ms_ocr.processing.image import max_image_pixels
    assert max_image_pixels() == 2_000_000
    img = I.render_pdf_page(str(tmp_path / "huge.pdf"), 1, 200)
    assert img.width * img.height <= 2_000_000 and img.width == 2 * img.height and img.width > 1990
    dpi = I.page_dpi(img)
    assert dpi == pytest.approx(72 * img.width / 14400, abs=0.01) and dpi <= 10
    # pages within the limit keep the requested DPI
    Image.new("RGB", (100, 50), "white").save(tmp_path / "small.pdf", resolution=72.0)
    small = I.render_pdf_page(str(tmp_path / "small.pdf"), 1, 144)
    assert small.size == (200, 100) and I.page_dpi(small) == 144
    for w, h in ((14400, 7200), (612, 792), (1, 14400), (14400, 14400)):
        scale = I.capped_scale(w, h, 200, 2_000_000)
        assert np.ceil(w * scale) * np.ceil(h * scale) <= 2_000_000 and scale <= 200 / 72


def test_store_counts_only_its_jobs_records(tmp_path):
    path = str(tmp_path / "results.jsonl")
    with open(path, "w") as f:  # written before records carried a job
        f.write(json.dumps({"key": "a", "source": "a", "page": 0, "ok": True, "text": "A"}) + "\n")
    store = R.ResultStore(path, job="job-1")
    assert set(store.done) == set()  # not this job's
    store.close()
    store = R.ResultStore(path, job="job-1", adopt=True)  # an older folder taken as this job's
    assert set(store.done) == {"a"}
    store.append({"key": "b", "source": "b", "page": 0, "ok": True, "text": "B"})
    store.close()
    assert [r["job"] for r in R.read_records(path)] == ["job-1", "job-1"]
    store = R.ResultStore(path, job="job-2")
    assert set(store.done) == set() and store.saved() == (0, 0)
    store.append({"key": "a", "source": "a", "page": 0, "ok": True, "text": "A2"})
    store.append({"key": "c", "source": "c", "page": 0, "ok": False, "error": "bad"})
    assert store.saved() == (2, 1)  # what an interrupted run reports: records this run, pages done
    store.close()
    assert [r.get("text") for r in R.read_records(path, "job-2")] == ["A2", None]
