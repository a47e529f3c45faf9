"""Batch results on disk: an append-only JSONL per shard (flushed per record, so nothing finished is lost),
resume by key, per-document Markdown, shard merging and the performance report."""

import csv
import glob
import json
import os

import numpy as np

from ms_ocr.batch.names import path_name, to_json


def shard_name(rank, world):
    return "results.jsonl" if world == 1 else f"results.rank{rank}-of{world}.jsonl"


def read_records(path, job=None):
    """Records of a results file (only job `job`'s when given); a torn last line (crash mid-write) is ignored."""
    records = []
    if not os.path.isfile(path):
        return records
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if job is None or record.get("job") == job:
                records.append(record)
    return records


RECORD_FIELDS = {"key": str, "source": str, "ok": bool}  # what every record this tool writes has


def foreign_line(path):
    """None when every line of a results file is a record this tool writes (a torn last line aside: a crash
    mid-write), else the first line that is not, as "line N: why" (a results.jsonl of another program)."""
    with open(path, "rb") as f:
        data = f.read()
    for n, raw in enumerate(data.split(b"\n")[:-1], 1):  # the last piece: empty, or a torn line
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return f"line {n} is not JSON"
        if not isinstance(record, dict):
            return f"line {n} is not a JSON object"
        for field, kind in RECORD_FIELDS.items():
            if not isinstance(record.get(field), kind):
                return f'line {n} has no {kind.__name__} "{field}"'
    return None


def foreign_files(out_dir):
    """["<file>: why"] for the files of `out_dir` that carry this tool's names but were not written by it (a
    results file of other records, a report.csv without this tool's header): a run must not rewrite, append to
    or remove them, even with --overwrite."""
    found = []
    for path in [os.path.join(out_dir, "results.jsonl"), *shard_files(out_dir)]:
        if os.path.isfile(path) and os.path.getsize(path) > 0:
            why = foreign_line(path)
            if why is not None:
                found.append(f"{path}: {why}")
    for path in [os.path.join(out_dir, "report.csv"), *glob.glob(os.path.join(glob.escape(out_dir), "report.rank*.csv"))]:
        if os.path.isfile(path) and os.path.getsize(path) > 0 and not is_report(path):
            found.append(f"{path}: its first line is not this tool's header")
    return found


def is_report(path):
    """The file starts with the header write_report writes."""
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        return f.readline().rstrip("\r\n") == ",".join(REPORT_FIELDS)


def latest(records):
    """The last record of each key (a re-run appends a new record for a retried input)."""
    out = {}
    for r in records:
        out[r["key"]] = r
    return out


class ResultStore:
    """Appends one JSON line per finished input and makes it durable before returning. With `job`, every record
    is stamped with it and only that job's records count as done; `adopt` stamps records that have no job
    (written before records carried one) as this job's first."""

    def __init__(self, path, job=None, adopt=False):
        self.path, self.job = path, job
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._repair_tail()
        if adopt and job is not None:
            self._stamp_unowned()
        # key -> the file stamp its finished record was made from (None in records older than stamps)
        self.done = {k: r.get("stamp") for k, r in latest(read_records(path, job)).items() if r.get("ok")}
        self._f = open(path, "a", encoding="utf-8")
        self._start, self._done_at_open = self._f.tell(), set(self.done)

    def is_done(self, item):
        """The item's page was finished from the same file (same key, and same size and mtime where the record
        has them)."""
        return item.key in self.done and self.done[item.key] in (None, item.stamp)

    def _repair_tail(self):
        """A crash mid-write can leave a last line without its newline: cut it so appends start clean."""
        if not os.path.isfile(self.path) or os.path.getsize(self.path) == 0:
            return
        with open(self.path, "rb+") as f:
            data = f.read()
            if not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)

    def _stamp_unowned(self):
        records = read_records(self.path)
        if not any("job" not in r for r in records):
            return
        tmp = f"{self.path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            for r in records:
                f.write(to_json(r if "job" in r else {**r, "job": self.job}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def append(self, record):
        if self.job is not None:
            record = {**record, "job": self.job}
        self._f.write(to_json(record) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        if record.get("ok"):
            self.done[record["key"]] = record.get("stamp")

    def saved(self):
        """(records written since this store opened, pages done in all), read back from the file: what is there
        is what an interrupted run has saved (a record still in Python's buffer is not, and is not counted)."""
        with open(self.path, "rb") as f:
            f.seek(self._start)
            lines = f.read().split(b"\n")[:-1]
        done = set(self._done_at_open)
        for line in lines:
            record = json.loads(line)
            if record.get("ok"):
                done.add(record["key"])
        return len(lines), len(done)

    def close(self):
        self._f.close()


def merge_shards(out_dir, world, job=None):
    """When every rank has finished (its .done marker exists), merge the shard files (job `job`'s records) into
    results.jsonl. Returns the merged path, or None while some rank is still running."""
    if world == 1:
        return os.path.join(out_dir, "results.jsonl")
    if any(not os.path.exists(os.path.join(out_dir, shard_name(r, world) + ".done")) for r in range(world)):
        return None
    records = []
    for r in range(world):
        records += latest(read_records(os.path.join(out_dir, shard_name(r, world)), job)).values()
    records.sort(key=lambda r: (r["source"], r.get("page", 0), r["key"]))
    target = os.path.join(out_dir, "results.jsonl")
    tmp = f"{target}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(to_json(rec) + "\n")
    os.replace(tmp, target)  # atomic: ranks finishing together write identical files
    return target


def doc_name(source):
    """The Markdown file name of a document: its absolute path encoded (names.path_name), so no two documents
    share one (a/scan.png and a/scan.jpg, a/x/y.png and a/x_y.png) and a document keeps its name across runs."""
    return path_name(source) + ".md"


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
        path = os.path.join(md_dir, doc_name(source))
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
    """Append this run's figures to the report (its header first in a new file); a file that is not such a
    report is left alone (the run checked for one before it started: foreign_files)."""
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    if not new and not is_report(path):
        raise OSError(f"{path} is not an ms_ocr batch report: not appended to")
    with open(path, "a", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=REPORT_FIELDS)
        if new:
            w.writeheader()
        w.writerow(figures)


def format_report(figures):
    width = max(len(k) for k in figures)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in figures.items())


def item_name(item):
    """A file name for one work item (precision dumps, drawings): the encoded absolute path of its source with
    the key's page and task suffix, unique as keys are."""
    return _record_name(item.source, item.key)


def _record_name(source, key):
    return path_name(source) + key[len(source):].replace("/", "+")


def write_dump(d, logits, token_ids):
    """A precision dump in folder d (made if missing): logits.npy [steps, V] and token_ids.npy [steps], the format
    scripts/compare_dumps.py reads; returns d."""
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "logits.npy"), logits)
    np.save(os.path.join(d, "token_ids.npy"), token_ids)
    return d


def save_dump(out_dir, item, dump):
    """Per-step logits [steps, V] (float32) and the chosen token ids of one input, as .npy."""
    return write_dump(os.path.join(out_dir, "dumps", item_name(item)), dump["logits"], dump["token_ids"])


def shard_files(out_dir):
    return sorted(glob.glob(os.path.join(out_dir, "results.rank*-of*.jsonl")))


def has_results(out_dir):
    """True when `out_dir` holds records of an earlier run (merged or of any shard)."""
    return any(os.path.getsize(p) > 0 for p in [os.path.join(out_dir, "results.jsonl"), *shard_files(out_dir)]
               if os.path.isfile(p))


def written_files(out_dir, record):
    """The files of `out_dir` that the batch runner writes for one record: its document's Markdown, its precision
    dump and its drawing (those that exist)."""
    name = _record_name(record["source"], record["key"])
    paths = [os.path.join(out_dir, "markdown", doc_name(record["source"])),
             os.path.join(out_dir, "dumps", name, "logits.npy"), os.path.join(out_dir, "dumps", name, "token_ids.npy"),
             os.path.join(out_dir, "vis", name + ".png")]
    return [p for p in paths if os.path.isfile(p)]


def clear(out_dir, rank, world):
    """Remove an earlier job's results before a run with --overwrite: only files this tool writes and its
    records name (never a folder's other files: a user's notes in OUT/markdown/ stay). Each rank removes its
    own shard file, marker, report and the files its records name (never another rank's shard: it may already be
    writing); rank 0 also the merged results, the shards of other world sizes and what their records name."""
    own = os.path.join(out_dir, shard_name(rank, world))
    results = [own]
    paths = [own, own + ".done", os.path.join(out_dir, f"report.rank{rank}.csv")]
    if rank == 0:
        merged = os.path.join(out_dir, "results.jsonl")
        others = [p for p in shard_files(out_dir) if not p.endswith(f"-of{world}.jsonl")]
        results += [merged] + others
        paths += [merged, os.path.join(out_dir, "report.csv")] + others
        paths += [p for p in glob.glob(os.path.join(glob.escape(out_dir), "results.rank*-of*.jsonl.done"))
                  if not p.endswith(f"-of{world}.jsonl.done")]
    for path in results:
        for record in read_records(path):
            if isinstance(record.get("source"), str) and isinstance(record.get("key"), str):
                paths += written_files(out_dir, record)
    for path in set(paths):
        if os.path.isfile(path):
            os.remove(path)
    for sub in ("markdown", "vis", "dumps"):  # folders this tool made, if they are now empty
        folder = os.path.join(out_dir, sub)
        for root, _, _ in sorted(os.walk(folder), key=lambda w: -len(w[0])) if os.path.isdir(folder) else ():
            try:
                os.rmdir(root)
            except OSError:
                pass
