"""Batch inputs (folders, PDFs, manifests, sharding) and the results store (torn lines, resume, merge), no model."""

import json
import os

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
    assert store.done == {"a"}  # the failure is retried, the torn record is gone
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
    assert sorted(os.path.basename(p) for p in paths) == ["x.md", "y.md"]
    assert open(os.path.join(out, "markdown", "x.md")).read() == "<!-- page 1 -->\nx#1\n\n<!-- page 2 -->\nx#2\n"
