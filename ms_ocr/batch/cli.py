"""Offline batch OCR (MindIE run_pa style): python -m ms_ocr.batch --model paddleocr-vl --input DIR --out OUT.

Folders (recursive), PDFs (pages rasterised with pypdfium2) and JSONL manifests in; continuous batching through
ms_ocr.engine; one durable JSONL record per page, resumable; Markdown per document; a performance report. Under
msrun each rank takes its share of the inputs and the last rank to finish merges the shard files.
"""

import os
import sys
import time

os.environ.setdefault("GLOG_v", "3")

from ms_ocr import models  # noqa: E402
from ms_ocr.proc import peak_rss_gb  # noqa: E402
from ms_ocr.cli import (CliError, Parser, add_device_args, add_mode_arg, add_output_args,  # noqa: E402
                        add_sampling_args, cli_main, load_pipeline, model_spec, print_notes, resolve_prompt,
                        sampling_config)


def build_parser():
    p = Parser(prog="python -m ms_ocr.batch", description="Offline batch OCR over folders, PDFs and manifests.")
    p.add_argument("--model", required=True, help=", ".join(models.names()))
    p.add_argument("--model-path", help="checkpoint folder (hub download or ms_ocr.convert output)")
    p.add_argument("--input", nargs="+", required=True,
                   help="image files, folders (recursive), PDF files, or .jsonl manifests "
                        '({"image": path, "task"|"prompt": ...} per line)')
    p.add_argument("--out", required=True, help="output folder (results.jsonl, markdown/, report.csv, ...)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--task", help="task of every input without its own (see python -m ms_ocr.infer --help)")
    g.add_argument("--prompt", help="free-form prompt instead of a task")
    add_mode_arg(p)
    p.add_argument("--max-batch-size", type=int, default=4, help="sequences decoded together (cache slots)")
    p.add_argument("--max-input-length", type=int, default=None,
                   help="longest prompt in tokens, image tokens included (default 4096, less if the model's "
                        "max_position_embeddings asks); longer inputs are recorded as errors")
    p.add_argument("--max-output-length", type=int, default=1024, help="new tokens per input at most")
    add_device_args(p)
    p.add_argument("--dpi", type=int, default=200, help="PDF rasterisation resolution (10-600)")
    add_sampling_args(p)
    add_output_args(p)
    p.add_argument("--visualize", action="store_true", help="draw parsed boxes into OUT/vis/ (tasks with boxes)")
    p.add_argument("--dump", nargs="*", metavar="KEY_GLOB",
                   help="precision dump: per-step logits and token ids of the inputs whose key matches a glob "
                        "(no glob: every input) into OUT/dumps/<key>/")
    p.add_argument("--rank", type=int, default=None, help="this process's shard (default: msrun/RANK_ID, else 0)")
    p.add_argument("--world-size", type=int, default=None, help="number of shards (default: msrun/RANK_SIZE, else 1)")
    p.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    p.add_argument("--overwrite", action="store_true",
                   help="OUT holds another job's results (other model, checkpoint, task/prompt or generation "
                        "settings): delete them and run this job (default: refuse)")

    return p


def rank_and_world(args):
    """(rank, world): explicit flags, else MindSpore's launcher (msrun exports RANK_ID and MS_WORKER_NUM to each
    worker), else RANK_ID/RANK_SIZE, else (0, 1). None in msrun's scheduler process, which has no share.

    Sharding needs no collective communication, so workers do not join msrun's cluster (communication.init):
    each reads its rank from the environment, and the files on disk do the merging."""
    if args.rank is not None or args.world_size is not None:
        return args.rank or 0, args.world_size or 1
    role = os.environ.get("MS_ROLE")
    if role == "MS_SCHED":
        return None
    if role == "MS_WORKER" and os.environ.get("MS_WORKER_NUM"):
        return int(os.environ.get("RANK_ID", os.environ.get("MS_NODE_ID", 0))), int(os.environ["MS_WORKER_NUM"])
    return int(os.environ.get("RANK_ID", 0)), int(os.environ.get("RANK_SIZE", 1))


class Progress:
    """One self-overwriting line on stderr: pages done, pages/s, tokens/s, ETA."""

    def __init__(self, total, enabled):
        self.total, self.enabled, self.done, self.tokens, self.t0 = total, enabled, 0, 0, time.perf_counter()

    def update(self, tokens):
        self.done += 1
        self.tokens += tokens
        if not self.enabled:
            return
        dt = max(time.perf_counter() - self.t0, 1e-9)
        rate = self.done / dt
        eta = (self.total - self.done) / rate if rate > 0 else 0
        width = len(str(self.total))
        sys.stderr.write(f"\r[{self.done:>{width}}/{self.total}] {rate:.3f} pages/s  {self.tokens / dt:.2f} tok/s  "
                         f"ETA {int(eta) // 60}m{int(eta) % 60:02d}s ")
        sys.stderr.flush()

    def close(self):
        if self.enabled and self.done:
            sys.stderr.write("\n")


def job_identity(args, model, model_dir, prompt, task, repetition_penalty=None):
    """The settings that decide a page's text: a page in OUT counts as done only for the same ones (job.py).
    `repetition_penalty`: the one decoding uses (--repetition-penalty, else the checkpoint version's); the output
    flags are recorded only when given (a job of an earlier ms_ocr, which had none of them, stays the same job)."""
    from ms_ocr.batch.job import checkpoint_fingerprint
    from ms_ocr.batch.job import precision_identity
    penalty = args.repetition_penalty if args.repetition_penalty is not None else repetition_penalty
    flags = {"early_stop": False} if args.no_early_stop else {}
    if args.max_pixels is not None:
        flags["max_pixels"] = args.max_pixels
    if args.clean_up_from is not None:
        flags["clean_up_from"] = args.clean_up_from
    if args.no_doc_postprocess:
        flags["doc_postprocess"] = False
    return {"tool": "ms_ocr.batch", "model": model, "checkpoint": checkpoint_fingerprint(model_dir), "task": task,
            "prompt": prompt, "mode": args.mode, "dpi": args.dpi, "max_output_length": args.max_output_length,
            "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
            "repetition_penalty": 1.0 if penalty is None else penalty, "no_repeat_ngram": args.no_repeat_ngram,
            "seed": args.seed, **flags, **precision_identity(args)}


class RunState:
    """What an interrupted run has saved, for its last line."""

    def __init__(self):
        self.out, self.store, self.progress = None, None, None

    def interrupted(self):
        head = "\n" if self.progress is not None and self.progress.enabled and self.progress.done else ""
        if self.store is None:
            return head + "error: interrupted before any page was run; saved 0 results"
        n, done = self.store.saved()
        return (head + f"error: interrupted; saved {n} result{'' if n == 1 else 's'} this run "
                f"({done} pages done in {self.out}); run the same command again to resume")


def run(argv, state=None):
    state = state or RunState()
    args = build_parser().parse_args(argv)
    for flag in ("max_batch_size", "max_input_length", "max_output_length"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise CliError(f"--{flag.replace('_', '-')} must be at least 1")
    spec = model_spec(args)
    model = spec.package
    args.max_new_tokens = args.max_output_length  # the sampling default for inputs
    shard = rank_and_world(args)
    if shard is None:
        return 0
    from ms_ocr.weights import locate
    model_dir = locate(args.model, args.model_path)
    spec = spec.for_checkpoint(model_dir)  # the checkpoint version's tasks and defaults
    job_prompt, job_task = resolve_prompt(args, spec.tasks, args.model)
    from ms_ocr.batch import inputs as I
    from ms_ocr.batch import job as J
    from ms_ocr.batch import results as R
    rank, world = shard
    items = I.shard(I.collect(args.input), rank, world)
    for item in items:
        if item.task is not None and item.task not in spec.tasks:
            raise CliError(f"{item.key}: unknown task {item.task!r} for {args.model}; choose one of: "
                           f"{', '.join(spec.tasks)}")
    identity = job_identity(args, model, model_dir, job_prompt, job_task, spec.repetition_penalty)
    with J.FolderLock(args.out, None if world == 1 else f"rank{rank}-of{world}"):
        state.out = args.out
        foreign = R.foreign_files(args.out)
        if foreign:
            raise J.JobError(f"{args.out} holds files this tool did not write ({'; '.join(foreign)}); they are left "
                             "untouched: use another --out")
        status = J.check_job(args.out, identity, args.overwrite, R.has_results(args.out))
        if status == "overwrite":
            R.clear(args.out, rank, world)
        elif status == "adopted":
            print(f"note: {args.out} has results but no {J.JOB_FILE} (written by an older ms_ocr): taken as this "
                  "job's", file=sys.stderr)
        if status != "same":
            J.write_job(args.out, identity, {"checkpoint_path": os.path.abspath(model_dir)})
        store = R.ResultStore(os.path.join(args.out, R.shard_name(rank, world)), J.job_id(identity),
                              adopt=status == "adopted")
        state.store = store
        return _run_job(args, spec, model_dir, items, job_prompt, job_task, world, rank, store, state)


def _run_job(args, spec, model_dir, items, job_prompt, job_task, world, rank, store, state):
    from ms_ocr.batch import inputs as I
    from ms_ocr.batch import results as R
    if os.path.exists(store.path + ".done"):  # this rank runs again: no merge until it has finished
        os.remove(store.path + ".done")
    todo = [item for item in items if not store.is_done(item)]
    skipped = len(items) - len(todo)

    _, pipe = load_pipeline(args, spec, model_dir)
    sampling = sampling_config(args, spec, pipe)
    from ms_ocr import line_reader
    from ms_ocr.engine import BatchEngine, Request
    max_input = args.max_input_length or max(1, min(4096, pipe.runtime.max_positions - args.max_output_length))
    try:
        engine = BatchEngine(pipe, sampling, args.max_batch_size, max_input, args.max_output_length)
    except ValueError as e:
        raise CliError(str(e)) from None

    import fnmatch
    dump_all = args.dump is not None and not args.dump
    progress = Progress(len(todo), not args.no_progress)
    state.progress = progress
    finished, pages = [], {}

    def requests():
        for item in todo:
            try:
                image = I.load(item, args.dpi)
            except Exception as e:  # noqa: BLE001 - a bad page is recorded, the run goes on
                on_result(Request(item.key, [], ""), None, e)
                continue
            pages[item.key] = (item, image)
            if item.prompt is not None:
                prompt, task = item.prompt, None
            elif item.task is not None:
                prompt, task = spec.tasks[item.task], item.task
            else:
                prompt, task = job_prompt, job_task
            dump = dump_all or any(fnmatch.fnmatchcase(item.key, g) for g in (args.dump or ()))
            yield Request(item.key, [image], prompt, task, dump=dump)

    by_key = {item.key: item for item in todo}

    def on_result(req, result, error):
        from ms_ocr.errors import user_error_message
        item = by_key[req.key]
        record = {"key": item.key, "source": item.source, "page": item.page, "stamp": item.stamp,
                  "ok": error is None}
        if item.page and item.key in pages:
            record["dpi"] = I.page_dpi(pages[item.key][1])  # below --dpi when the page hit the pixel limit
        if error is not None:
            record["error"] = user_error_message(error)
        else:
            record.update(text=result["text"], num_tokens=len(result["token_ids"]), token_ids=result["token_ids"],
                          finish_reason=result["finish_reason"], task=req.task, timings=result["timings"])
            for key in ("boxes", "grounding", "stopped_by"):
                if key in result:
                    record[key] = result[key]
            print_notes(item.key, result)
            if "dump" in result:
                record["dump"] = R.save_dump(args.out, item, result["dump"])
            if args.visualize and result.get("boxes"):
                from ms_ocr.processing.boxes import draw_boxes
                vis = os.path.join(args.out, "vis", R.item_name(item) + ".png")
                os.makedirs(os.path.dirname(vis), exist_ok=True)
                draw_boxes(pages[item.key][1], result["boxes"]).save(vis)
                record["visualization"] = vis
        store.append(record)
        pages.pop(item.key, None)
        finished.append(record)
        progress.update(record.get("num_tokens", 0))

    t0 = time.perf_counter()
    try:
        line_reader.run(engine, requests(), on_result)
    finally:
        progress.close()
        store.close()
    wall = time.perf_counter() - t0
    open(store.path + ".done", "w").close()
    merged = R.merge_shards(args.out, world, store.job)
    if merged:
        R.write_markdown(args.out, R.latest(R.read_records(merged, store.job)).values())
    rss_gb = peak_rss_gb() or 0.0
    figures = R.report(finished, wall, sum(engine.compile_seconds().values()), skipped, rss_gb, args.max_batch_size)
    R.write_report(os.path.join(args.out, "report.csv" if world == 1 else f"report.rank{rank}.csv"), figures)
    print(R.format_report(figures), file=sys.stderr)
    return 0 if all(r["ok"] for r in finished) else 3


def main(argv=None):
    state = RunState()
    return cli_main(lambda a: run(a, state), argv, interrupted=state.interrupted, exit_on_signal=True)
