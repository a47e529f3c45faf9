"""python -m ms_ocr.pipeline --image page.png | --pdf doc.pdf --out DIR: layout analysis + region recognition ->
Markdown, JSON (every block: label, box in page pixels, outline, reading order, text; the layout model's detections)
and a drawing of the numbered blocks. The layout checkpoint's model_type picks the PaddleOCR-VL pipeline version
(PP-DocLayoutV2: 1.0, V3: 1.6, V4: 1.8), or --pipeline-version does."""

import argparse
import os
import sys
import time

os.environ.setdefault("GLOG_v", "3")

from ms_ocr import models  # noqa: E402
from ms_ocr.cli import CliError, Parser, add_device_args, add_sampling_args, cli_main  # noqa: E402

REGION_TOKENS = 4096  # a region's default token budget (PaddleX's VLM default is larger; our regions rarely need it)


def build_parser():
    from ms_ocr.pipeline.versions import VERSIONS
    p = Parser(prog="python -m ms_ocr.pipeline",
               description="Parse document pages as PaddleOCR-VL's pipeline does: PP-DocLayoutV2/V3/V4 layout + a VLM "
                           "per region -> Markdown and JSON.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--image", nargs="+", help="page image file(s)")
    src.add_argument("--pdf", help="a PDF: every page (or --pages) is parsed")
    p.add_argument("--out", required=True, help="output folder (created): NAME.md, NAME.json, NAME_layout.png, imgs/")
    p.add_argument("--pages", help="PDF pages, e.g. 1-3,7 (default all)")
    p.add_argument("--dpi", type=int, default=200, help="PDF rendering resolution (10-600)")
    p.add_argument("--recognizer", default=models.names()[0], choices=models.names(),
                   help="VLM that reads the regions")
    p.add_argument("--model-path", help="recogniser checkpoint folder")
    p.add_argument("--layout-model-path",
                   help="layout checkpoint folder (PP-DocLayoutV2/V3/V4_safetensors or a transformers save); its "
                        "model_type picks the pipeline version (default: PP-DocLayoutV2_safetensors, or the one of "
                        "--pipeline-version)")
    p.add_argument("--pipeline-version", choices=list(VERSIONS),
                   help="PaddleOCR-VL pipeline rules: 1.0 (PP-DocLayoutV2), 1.5 and 1.6 (PP-DocLayoutV3, the same "
                        "rules), 1.8 (PP-DocLayoutV4, partly assumed: docs/deployment.md); default: the layout "
                        "checkpoint's")
    p.add_argument("--layout-threshold", type=float,
                   help="one layout score threshold for every label, instead of the version's (1.0: 0.4-0.5 by "
                        "label, 1.5/1.6: 0.3)")
    p.add_argument("--layout-mode", default="auto", choices=["auto", "graph", "eager"],
                   help="layout model as compiled graphs (~1.3 s a page on 2 CPU cores after ~9-12 s of compiling) "
                        "or op by op (no compile, ~2-2.2 s a page); auto: eager on the CPU for fewer than 12 pages, "
                        "else graph")
    p.add_argument("--charts", action="store_true", help="recognise charts (default: kept as pictures)")
    p.add_argument("--keep-all-labels", action="store_true",
                   help="also put headers, footers, page numbers, footnotes and side text into the Markdown")
    p.add_argument("--max-batch-size", type=int, default=8, help="regions recognised at once")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="per region (default 4096, or what the recogniser's context leaves after a region's prompt)")
    add_device_args(p)
    add_sampling_args(p)
    p.add_argument("--overwrite", action="store_true",
                   help="OUT holds another job's results (other recogniser, checkpoints, options or generation "
                        "settings): delete them and run this job (default: refuse)")
    return p


def parse_pages(spec, count):
    if not spec:
        return list(range(1, count + 1))
    pages = []
    for part in spec.split(","):
        try:
            lo, _, hi = part.strip().partition("-")
            lo, hi = int(lo), int(hi or lo)
        except ValueError:
            raise CliError(f"--pages: {part!r} is not a page number or range (e.g. 1-3,7)") from None
        if lo < 1 or hi < lo or hi > count:
            raise CliError(f"--pages: {part.strip()} is outside the document's pages 1-{count}")
        pages += range(lo, hi + 1)
    return sorted(set(pages))


def _inputs(args):
    """[(name, loader)]: a page name and a function returning its PIL image (raises on a bad page)."""
    from ms_ocr.processing.image import load_image
    if args.pdf:
        from ms_ocr.batch.inputs import pdf_page_count, render_pdf_page
        count = pdf_page_count(args.pdf)
        return [(p, (lambda p=p: render_pdf_page(args.pdf, p, args.dpi))) for p in parse_pages(args.pages, count)]
    if args.pages:
        raise CliError("--pages applies to --pdf")
    for path in args.image:  # a mistyped path fails before the weights load; a bad image is that page's error
        if not os.path.isfile(path):
            raise CliError(f"image file not found: {path}" if not os.path.exists(path) else f"{path} is not a file")
    from ms_ocr.pipeline import outputs as O
    own = O.own_files(args.out) if os.path.isdir(args.out) else set()
    images = []
    for path in args.image:
        if os.path.realpath(path) in own:  # a drawing or picture an earlier run wrote (--out = the input folder)
            print(f"note: {path} was written by an earlier pipeline run into {args.out}: not read as a page",
                  file=sys.stderr)
        else:
            images.append(path)
    if not images:
        raise CliError(f"every --image is a file an earlier pipeline run wrote into {args.out}")
    args.image = images
    return [(path, (lambda path=path: load_image(path))) for path in images]  # decoded one page at a time


def load(args, pages=None):
    """DocumentPipeline for the parsed options; `pages`: how many pages the run will parse (for --layout-mode
    auto)."""
    from ms_ocr.cli import sampling_config
    from ms_ocr.pipeline.document import DocumentPipeline
    from ms_ocr.pipeline.markdown import IGNORED_LABELS

    def sampling(spec, vlm):  # the default budget is 4096 tokens, cut to what a region's prompt leaves (_recognize)
        budget = args.max_new_tokens or REGION_TOKENS
        return sampling_config(argparse.Namespace(**{**vars(args), "max_new_tokens": budget}), spec, vlm)
    return DocumentPipeline.load(args.recognizer, args.model_path, args.layout_model_path, args.device, args.dtype,
                                 args.threads, sampling=sampling,
                                 layout_mode=args.layout_mode, pages=pages, quantize=args.quantize,
                                 kv_cache_dtype=args.kv_cache_dtype, charts=args.charts,
                                 max_batch_size=args.max_batch_size, version=args.pipeline_version,
                                 layout_threshold=args.layout_threshold,
                                 ignore=() if args.keep_all_labels else IGNORED_LABELS)


def job_identity(args):
    """The settings that decide the results (batch/job.py): a page in OUT counts as done only for the same."""
    from ms_ocr.batch import job as J
    from ms_ocr.batch.job import checkpoint_fingerprint
    from ms_ocr.pipeline.document import locate_layout
    from ms_ocr.weights import locate
    layout_dir, version = locate_layout(args.layout_model_path, args.pipeline_version)
    model_dir = locate(args.recognizer, args.model_path)
    # the penalty decoding uses: --repetition-penalty, else the checkpoint version's (1.0 but for HunyuanOCR-1.5)
    penalty = args.repetition_penalty if args.repetition_penalty is not None else \
        models.get(args.recognizer).for_checkpoint(model_dir).repetition_penalty
    early_stop = {"early_stop": False} if args.no_early_stop else {}  # recorded when given: earlier runs' stay theirs
    return {"tool": "ms_ocr.pipeline", "recognizer": models.canonical(args.recognizer),
            "checkpoint": checkpoint_fingerprint(model_dir), "layout_checkpoint": checkpoint_fingerprint(layout_dir),
            "pipeline_version": version.name, "layout_threshold": args.layout_threshold,
            "charts": args.charts, "keep_all_labels": args.keep_all_labels, "dpi": args.dpi,
            "max_new_tokens": args.max_new_tokens or REGION_TOKENS, "temperature": args.temperature,
            "top_p": args.top_p, "top_k": args.top_k, "repetition_penalty": penalty,
            "no_repeat_ngram": args.no_repeat_ngram, "seed": args.seed, **early_stop, **J.precision_identity(args)}


class RunState:
    """What an interrupted run has written, for its last line."""

    def __init__(self):
        self.out, self.saved = None, 0

    def interrupted(self):
        if self.out is None:
            return "error: interrupted before any page was parsed; saved 0 results"
        n = self.saved
        return (f"error: interrupted; saved {n} page result{'' if n == 1 else 's'} in {self.out} this run; run "
                "the same command again to resume")


def run(argv, state=None):
    from ms_ocr.batch import job as J
    from ms_ocr.pipeline import outputs as O
    state = state or RunState()
    args = build_parser().parse_args(argv)
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise CliError("--max-new-tokens must be at least 1")
    if args.layout_threshold is not None and not 0 <= args.layout_threshold <= 1:
        raise CliError(f"--layout-threshold must be in 0..1, not {args.layout_threshold}")
    pages = _inputs(args)
    identity = job_identity(args)
    with J.FolderLock(args.out):
        state.out = args.out
        status = J.check_job(args.out, identity, args.overwrite, O.has_outputs(args.out))
        if status == "overwrite":
            O.remove_outputs(args.out)
        elif status == "adopted":
            print(f"note: {args.out} has results but no {J.JOB_FILE} (written by an older ms_ocr): taken as this "
                  "job's", file=sys.stderr)
        if status != "same":
            J.write_job(args.out, identity)
        names = O.claim_names(args.out, [args.pdf] if args.pdf else [path for path, _ in pages])
        if args.pdf:
            return _run_pdf(args, pages, names[args.pdf], state)
        return _run_images(args, pages, names, state)


def _run_pdf(args, pages, name, state):
    from ms_ocr.pipeline import outputs as O
    done = O.finished_pages(args.out, name, args.pdf)
    doc = load(args, sum(page_no not in done for page_no, _ in pages))  # a resumed long PDF may go eager
    source = os.path.abspath(args.pdf)
    records, markdown, failed = [], [], 0
    if done:
        print(f"{len(done)} page(s) already done in {args.out}, kept", file=sys.stderr)
    for page_no, get in pages:
        if page_no in done:
            record = done[page_no]
            md = record.get("markdown")
        else:
            record, md = _parse_page(doc, get, args.out, f"{name}_page{page_no}", f"imgs/{name}/page{page_no}",
                                     pdf=True)
            record["page"] = page_no
            if md is not None:
                record["markdown"] = md
            state.saved += 1
        records.append(record)
        failed += "error" in record
        if md:
            markdown.append(md)
        O.write(args.out, name, {"source": source, "pages": records}, "\n\n".join(markdown))
    if not pages:
        O.write(args.out, name, {"source": source, "pages": []}, "")
    return _summary(args.out, len(pages), failed)


def _run_images(args, pages, names, state):
    from ms_ocr.batch.names import display
    from ms_ocr.pipeline import outputs as O
    kept = {path for path, _ in pages if O.finished_image(args.out, names[path], path)}
    doc = load(args, sum(path not in kept for path, _ in pages))
    failed = 0
    for path, get in pages:
        name = names[path]
        if path in kept:
            print(f"{display(path)}: already done in {args.out}, kept", file=sys.stderr)
            continue
        record, md = _parse_page(doc, get, args.out, name, f"imgs/{name}")
        record["source"] = os.path.abspath(path)
        failed += "error" in record
        O.write(args.out, name, record, md or "")
        state.saved += 1
    return _summary(args.out, len(pages), failed)


def _summary(out, count, failed):
    print(f"wrote {out} ({count} page(s){f', {failed} failed' if failed else ''})", file=sys.stderr)
    return 3 if failed else 0


def _parse_page(doc, get, out, name, picture_dir, pdf=False):
    """(JSON record, Markdown) of one page; a page that cannot be read or parsed gives a record with its error.
    A PDF page's record has the DPI it was rendered at (below --dpi when the page hit the pixel limit)."""
    from ms_ocr.errors import user_error_message
    t0 = time.perf_counter()
    try:
        page = get()
        doc.picture_dir = picture_dir
        result = doc.parse(page)
    except Exception as e:  # noqa: BLE001 - one bad page of a document: recorded, the others go on
        if os.environ.get("MS_OCR_DEBUG"):
            raise
        print(f"error: {name}: {user_error_message(e)}", file=sys.stderr)
        return {"error": user_error_message(e)}, None
    result.save_pictures(out)
    result.draw(page).save(os.path.join(out, f"{name}_layout.png"))
    record = result.as_dict()
    if pdf:
        from ms_ocr.batch.inputs import page_dpi
        record["dpi"] = page_dpi(page)
    record["timings"]["total_ms"] = 1000 * (time.perf_counter() - t0)
    return record, result.markdown()


def main(argv=None):
    state = RunState()
    return cli_main(lambda a: run(a, state), argv, interrupted=state.interrupted, exit_on_signal=True)
