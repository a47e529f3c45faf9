"""Batch results on disk: an append-only JSONL per shard (flushed per record, so nothing finished is lost),
resume by key, per-document Markdown, shard merging and the performance report."""

import csv
import glob
import json
import os
import re

import numpy as np


def shard_name(rank, world):
    return "results.jsonl" if world == 1 else f"results.rank{rank}-of{world}.jsonl"


def read_records(path):
    """Records of a results file; a torn last line (crash mid-write) is ignored."""
    records = []
    if not os.path.isfile(path):
        return records
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def latest(records):
    """The last record of each key (a re-run appends a new record for a retried input)."""
    out = {}
    for r in records:
        out[r["key"]] = r
    return out


class ResultStore:
    """Appends one JSON line per finished input and makes it durable before returning."""

    def __init__(self, path):
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._repair_tail()
        self.done = {k for k, r in latest(read_records(path)).items() if r.get("ok")}
        self._f = open(path, "a", encoding="utf-8")

    def _repair_tail(self):
        """A crash mid-write can leave a last line without its newline: cut it so appends start clean."""
        if not os.path.isfile(self.path) or os.path.getsize(self.path) == 0:
            return
        with open(self.path, "rb+") as f:
            data = f.read()
            if not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)

    def append(self, record):
        self._f.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        if record.get("ok"):
            self.done.add(record["key"])

    def close(self):
        self._f.close()


def merge_shards(out_dir, world):
    """When every rank has finished (its .done marker exists), merge the shard files into results.jsonl.
    Returns the merged path, or None while some rank is still running."""
    if world == 1:
        return os.path.join(out_dir, "results.jsonl")
    if any(not os.path.exists(os.path.join(out_dir, shard_name(r, world) + ".done")) for r in range(world)):
        return None
    records = []
    for r in range(world):
        records += latest(read_records(os.path.join(out_dir, shard_name(r, world)))).values()
    records.sort(key=lambda r: (r["source"], r.get("page", 0), r["key"]))
    target = os.path.join(out_dir, "results.jsonl")
    tmp = f"{target}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    os.replace(tmp, target)  # atomic: ranks finishing together write identical files
    return target


def _doc_name(source):
    stem = re.sub(r"[^\w.-]+", "_", os.path.splitext(os.path.normpath(source))[0].strip("/\\."))
    return stem or "document"


def write_markdown(out_dir, records):
    """One Markdown file per document (its pages in order) from the finished records; returns the paths."""
    docs = {}
    for r in records:
        if r.get("ok"):
            docs.setdefault(r["source"], []).append(r)
    paths = []
    md_dir = os.path.join(out_dir, "markdown")
    os.makedirs(md_dir, exist_ok=True)
    for source, recs in sorted(docs.items()):
        recs.sort(key=lambda r: (r.get("page", 0), r["key"]))
        parts = []
        for r in recs:
            head = f"<!-- page {r['page']} -->\n" if r.get("page") else ""
            parts.append(head + r["text"].strip())
        path = os.path.join(md_dir, _doc_name(source) + ".md")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n\n".join(parts) + "\n")
        paths.append(path)
    return paths


REPORT_FIELDS = ("pages", "ok", "failed", "skipped", "wall_s", "compile_s", "pages_per_s", "generated_tokens",
                 "tokens_per_s", "avg_latency_ms", "avg_first_token_ms", "avg_decode_tokens_per_s", "peak_rss_gb",
                 "max_batch_size")


def report(records, wall_s, compile_s, skipped, peak_rss_gb, max_batch_size):
    """MindIE-style benchmark figures of this run's records (compile time apart from run time)."""
    ok = [r for r in records if r.get("ok")]
    tokens = sum(r["num_tokens"] for r in ok)
    run_s = max(wall_s - compile_s, 1e-9)

    def mean(key):
        vals = [r["timings"][key] for r in ok if r["timings"].get(key)]
        return float(np.mean(vals)) if vals else 0.0

    return {"pages": len(records), "ok": len(ok), "failed": len(records) - len(ok), "skipped": skipped,
            "wall_s": round(wall_s, 3), "compile_s": round(compile_s, 3),
            "pages_per_s": round(len(ok) / run_s, 4), "generated_tokens": tokens,
            "tokens_per_s": round(tokens / run_s, 3), "avg_latency_ms": round(mean("latency_ms"), 1),
            "avg_first_token_ms": round(mean("first_token_ms"), 1),
            "avg_decode_tokens_per_s": round(mean("decode_tokens_per_s"), 3),
            "peak_rss_gb": round(peak_rss_gb, 3), "max_batch_size": max_batch_size}


def write_report(path, figures):
    new = not os.path.exists(path)
    with open(path, "a", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=REPORT_FIELDS)
        if new:
            w.writeheader()
        w.writerow(figures)


def format_report(figures):
    width = max(len(k) for k in figures)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in figures.items())


def dump_dir(out_dir, key):
    return os.path.join(out_dir, "dumps", re.sub(r"[^\w.@#-]+", "_", key).strip("_"))


def save_dump(out_dir, key, dump):
    """Per-step logits [steps, V] (float32) and the chosen token ids of one input, as .npy."""
    d = dump_dir(out_dir, key)
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "logits.npy"), dump["logits"])
    np.save(os.path.join(d, "token_ids.npy"), dump["token_ids"])
    return d


def shard_files(out_dir):
    return sorted(glob.glob(os.path.join(out_dir, "results.rank*-of*.jsonl")))
