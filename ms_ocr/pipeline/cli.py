"""python -m ms_ocr.pipeline --image page.png | --pdf doc.pdf --out DIR: layout analysis + region recognition ->
Markdown, JSON (every block: label, box in page pixels, reading order, text) and a drawing of the numbered blocks."""

import json
import os
import sys
import time

os.environ.setdefault("GLOG_v", "3")

from ms_ocr.infer import CliError, _Parser, add_sampling_args, cli_main  # noqa: E402

RECOGNIZERS = ("paddleocr-vl", "hunyuan-ocr", "deepseek-ocr", "deepseek-ocr2")


def build_parser():
    p = _Parser(prog="python -m ms_ocr.pipeline",
                description="Parse document pages: PP-DocLayoutV2 layout + a VLM per region -> Markdown and JSON.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--image", nargs="+", help="page image file(s)")
    src.add_argument("--pdf", help="a PDF: every page (or --pages) is parsed")
    p.add_argument("--out", required=True, help="output folder (created): NAME.md, NAME.json, NAME_layout.png, imgs/")
    p.add_argument("--pages", help="PDF pages, e.g. 1-3,7 (default all)")
    p.add_argument("--dpi", type=int, default=200, help="PDF rendering resolution")
    p.add_argument("--recognizer", default="paddleocr-vl", choices=RECOGNIZERS, help="VLM that reads the regions")
    p.add_argument("--model-path", help="recogniser checkpoint folder")
    p.add_argument("--layout-model-path", help="PP-DocLayoutV2 checkpoint folder (PP-DocLayoutV2_safetensors)")
    p.add_argument("--layout-mode", default="auto", choices=["auto", "graph", "eager"],
                   help="layout model as one compiled graph (faster per page after a 35-60 s compile, ~7 GB on CPU) "
                        "or op by op (no compile, ~1.4 GB, ~3x slower per page); auto: eager on the CPU for fewer "
                        "than 5 pages, else graph")
    p.add_argument("--charts", action="store_true", help="recognise charts (default: kept as pictures)")
    p.add_argument("--keep-all-labels", action="store_true",
                   help="also put headers, footers, page numbers, footnotes and side text into the Markdown")
    p.add_argument("--max-batch-size", type=int, default=8, help="regions recognised at once")
    p.add_argument("--max-new-tokens", type=int, default=4096, help="per region")
    p.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16", "fp16"])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "ascend"])
    p.add_argument("--threads", type=int, default=None)
    add_sampling_args(p)
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
    images = [(path, load_image(path)) for path in args.image]  # bad images fail before the weights load
    return [(path, (lambda img=img: img)) for path, img in images]


def load(args, pages=None):
    """DocumentPipeline for the parsed options; `pages`: how many pages the run will parse (for --layout-mode
    auto)."""
    from ms_ocr.infer import sampling_config
    from ms_ocr.pipeline.document import DocumentPipeline
    from ms_ocr.pipeline.markdown import IGNORED_LABELS
    return DocumentPipeline.load(args.recognizer, args.model_path, args.layout_model_path, args.device, args.dtype,
                                 args.threads, sampling=lambda package, vlm: sampling_config(args, package, vlm),
                                 layout_mode=args.layout_mode, pages=pages, charts=args.charts,
                                 max_batch_size=args.max_batch_size,
                                 ignore=() if args.keep_all_labels else IGNORED_LABELS)


def _stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def run(argv):
    args = build_parser().parse_args(argv)
    if args.max_new_tokens < 1 or args.max_batch_size < 1 or args.dpi < 1:
        raise CliError("--max-new-tokens, --max-batch-size and --dpi must be at least 1")
    pages = _inputs(args)
    os.makedirs(args.out, exist_ok=True)
    if args.pdf:
        done = _finished_pages(args.out, _stem(args.pdf), args.pdf)
        todo = sum(page_no not in done for page_no, _ in pages)
    else:
        todo = sum(not _finished_image(args.out, _stem(path), path) for path, _ in pages)
    doc = load(args, todo)  # pages left to parse: a resumed run of a long PDF may take the eager layout
    failed = 0
    if args.pdf:
        stem = _stem(args.pdf)
        records, markdown = [], []
        if done:
            print(f"{len(done)} page(s) already done in {args.out}, kept", file=sys.stderr)
        for page_no, get in pages:
            if page_no in done:
                record = done[page_no]
                md = record.get("markdown")
            else:
                record, md = _parse_page(doc, get, args.out, f"{stem}_page{page_no}", f"imgs/page{page_no}")
                record["page"] = page_no
                if md is not None:
                    record["markdown"] = md
            records.append(record)
            failed += "error" in record
            if md:
                markdown.append(md)
            _write(args.out, stem, {"source": os.path.abspath(args.pdf), "pages": records}, "\n\n".join(markdown))
        if not pages:
            _write(args.out, stem, {"source": os.path.abspath(args.pdf), "pages": []}, "")
    else:
        for path, get in pages:
            stem = _stem(path)
            if _finished_image(args.out, stem, path):
                print(f"{path}: already done in {args.out}, kept", file=sys.stderr)
                continue
            record, md = _parse_page(doc, get, args.out, stem, f"imgs/{stem}" if len(pages) > 1 else "imgs")
            record["source"] = os.path.abspath(path)
            failed += "error" in record
            _write(args.out, stem, record, md or "")
    print(f"wrote {args.out} ({len(pages)} page(s){f', {failed} failed' if failed else ''})", file=sys.stderr)
    return 3 if failed else 0


def _earlier_record(out, stem, source):
    """The JSON an earlier run wrote for `source` into `out`, or None (absent, unreadable or another source)."""
    try:
        with open(os.path.join(out, stem + ".json"), encoding="utf-8") as f:
            old = json.load(f)
    except (OSError, ValueError):
        return None
    return old if isinstance(old, dict) and old.get("source") == os.path.abspath(source) else None


def _finished_image(out, stem, path):
    """True when an earlier run wrote this image's results into `out` without an error."""
    old = _earlier_record(out, stem, path)
    return old is not None and "error" not in old and os.path.isfile(os.path.join(out, stem + ".md"))


def _finished_pages(out, stem, pdf):
    """{page: record} of the pages an earlier run of the same PDF into `out` finished (failed pages are redone)."""
    old = _earlier_record(out, stem, pdf) or {}
    return {r["page"]: r for r in old.get("pages", []) if isinstance(r, dict) and "error" not in r and "page" in r}


def _parse_page(doc, get, out, name, picture_dir):
    """(JSON record, Markdown) of one page; a page that cannot be read or parsed gives a record with its error."""
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
    record["timings"]["total_ms"] = 1000 * (time.perf_counter() - t0)
    return record, result.markdown()


def _write(out, stem, record, markdown):
    """JSON and Markdown of a document, replaced atomically (a PDF's are rewritten after every page)."""
    for ext, text in ((".json", json.dumps(record, ensure_ascii=False, indent=1)), (".md", markdown + "\n")):
        path = os.path.join(out, stem + ext)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)


def main(argv=None):
    return cli_main(run, argv)
