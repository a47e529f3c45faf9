"""The pipeline's files in its output folder: one output name per input (unique, kept across runs), the records
earlier runs left (resume), atomic writes, and removing an earlier job's files (--overwrite).

Per input NAME: NAME.json (its "source" is the input's absolute path: it owns the name), NAME.md, the drawings
NAME_layout.png (image) or NAME_pageN_layout.png (PDF), and pictures under imgs/NAME/ (PDF: imgs/NAME/pageN/)."""

import glob
import json
import os
import re

from ms_ocr.batch.names import stem_name, to_json


def earlier_record(out, name):
    """The JSON object NAME.json holds, or None (absent or unreadable)."""
    try:
        with open(os.path.join(out, name + ".json"), encoding="utf-8") as f:
            old = json.load(f)
    except (OSError, ValueError):
        return None
    return old if isinstance(old, dict) else None


def _owners(out):
    """{name: source} of the pipeline results in `out`; a name with files but no readable record maps to None."""
    owners = {}
    for path in glob.glob(os.path.join(glob.escape(out), "*.json")) + glob.glob(os.path.join(glob.escape(out), "*.md")):
        name = os.path.splitext(os.path.basename(path))[0]
        if name not in owners or owners[name] is None:
            record = earlier_record(out, name)
            owners[name] = record.get("source") if record is not None else None
    owners.pop("job", None)
    return owners


def claim_names(out, sources):
    """{source: name} for the inputs of a run. A name is the input's stem (names.stem_name), or stem-2, stem-3,
    ... when that name belongs to another input, of this run or of an earlier one (its NAME.json says whose it
    is; a NAME.json or NAME.md that is not a pipeline record is never overwritten). An input whose results are
    already in `out` keeps their name, so `dA/page.png dB/page.png` get page and page-2 in every run."""
    owners = _owners(out)
    names, taken = {}, {"job"}  # job.json is the folder's job record
    for src in sources:  # first the inputs that already own a name
        source, base = os.path.abspath(src), stem_name(src)
        own = [n for n, s in owners.items() if s == source and re.fullmatch(re.escape(base) + r"(-\d+)?", n)]
        if own:
            names[src] = min(own, key=lambda n: (len(n), n))
            taken.add(names[src])
    for src in sources:
        if src in names:
            continue
        base, n = stem_name(src), 1
        while (base if n == 1 else f"{base}-{n}") in taken or (base if n == 1 else f"{base}-{n}") in owners:
            n += 1
        names[src] = base if n == 1 else f"{base}-{n}"
        taken.add(names[src])
    return names


def own_files(out):
    """The real paths of the files earlier runs wrote into `out`: each result's drawings and the pictures its
    record names (what a rerun given OUT's images, e.g. `--image out/*.png --out out`, must not read as pages)."""
    files = set()
    for name, source in _owners(out).items():
        if source is None:
            continue
        record = earlier_record(out, name) or {}
        files.add(os.path.realpath(os.path.join(out, name + "_layout.png")))
        for page in record.get("pages") or [] if isinstance(record.get("pages"), list) else []:
            if isinstance(page, dict) and isinstance(page.get("page"), int):
                files.add(os.path.realpath(os.path.join(out, f"{name}_page{page['page']}_layout.png")))
        files.update(_pictures(out, record))
    return files


def has_outputs(out):
    return any(source is not None for source in _owners(out).values())


def finished_image(out, name, path):
    """True when an earlier run wrote this image's results under `name` without an error."""
    old = earlier_record(out, name)
    return (old is not None and old.get("source") == os.path.abspath(path) and "error" not in old
            and os.path.isfile(os.path.join(out, name + ".md")))


def finished_pages(out, name, pdf):
    """{page: record} of the pages an earlier run of the same PDF finished (failed pages are redone)."""
    old = earlier_record(out, name) or {}
    if old.get("source") != os.path.abspath(pdf):
        return {}
    return {r["page"]: r for r in old.get("pages", []) if isinstance(r, dict) and "error" not in r and "page" in r}


def write(out, name, record, markdown):
    """NAME.json and NAME.md, each replaced atomically (a PDF's are rewritten after every page); no temporary
    file is left behind if writing fails."""
    for ext, text in ((".json", to_json(record, indent=1)), (".md", markdown + "\n")):
        path = os.path.join(out, name + ext)
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


def _pictures(out, record):
    """The picture files a record's blocks name, inside OUT/imgs/ only (a hand-edited record cannot point out)."""
    root = os.path.realpath(os.path.join(out, "imgs"))
    pages = record.get("pages") if isinstance(record.get("pages"), list) else [record]
    for page in pages:
        for block in (page.get("blocks") or []) if isinstance(page, dict) else []:
            rel = block.get("image") if isinstance(block, dict) else None
            if isinstance(rel, str):
                path = os.path.realpath(os.path.join(out, rel))
                if os.path.commonpath([path, root]) == root:
                    yield path


def remove_outputs(out):
    """Delete the files of every pipeline result in `out` (--overwrite): NAME.json, NAME.md, the drawings and the
    pictures its record names. Files the pipeline did not write (a user's notes.md, holiday.jpg in imgs/) stay;
    picture folders are removed only once empty."""
    for name, source in _owners(out).items():
        if source is None:
            continue
        record = earlier_record(out, name) or {}
        paths = [os.path.join(out, name + ext) for ext in (".json", ".md", "_layout.png")]
        for page in record.get("pages") or [] if isinstance(record.get("pages"), list) else []:
            if isinstance(page, dict) and isinstance(page.get("page"), int):
                paths.append(os.path.join(out, f"{name}_page{page['page']}_layout.png"))
        paths += list(_pictures(out, record))
        for path in paths:
            if os.path.isfile(path):
                os.remove(path)
    imgs = os.path.join(out, "imgs")
    if os.path.isdir(imgs):
        for root, _, _ in sorted(os.walk(imgs), key=lambda w: -len(w[0])):
            try:
                os.rmdir(root)  # only empty folders
            except OSError:
                pass
