"""HunyuanOCR output handling: the reference's long-output cleanup and the two spotting parsers.

Spotting output (1.0's `spotting`, 1.5's `spotting_hunyuan`), after special tokens are skipped, is a sequence of
`TEXT(x1,y1),(x2,y2)` items with integer coordinates on a 0-1000 scale of the input image (x first), one per text
line. 1.5's `spotting_json` answers a JSON array of {"box": [xmin, ymin, xmax, ymax] on the same scale, "text"}
(its prompt in Tencent-Hunyuan/HunyuanOCR inference/utils/tasks.py, commit c55965d3).
"""

import json
import re

_BOX = re.compile(r"\((\d+),(\d+)\),\((\d+),(\d+)\)")


def clean_repeated_substrings(text, min_chars=8000, min_repeats=10):
    """HunyuanOCR's cleanup of runaway outputs: for a text of at least `min_chars` characters (1.0's scripts:
    8,000; 1.5's clients, inference/utils/output_utils.py: 2,000), find the shortest unit (2 .. len/min_repeats
    chars) that ends the text and repeats back to back >= `min_repeats` times, and keep one copy of it. Shorter
    texts, or texts without such a tail, are returned unchanged; min_chars 0 or less: never."""
    n = len(text)
    if min_chars <= 0 or n < min_chars:
        return text
    for length in range(2, n // min_repeats + 1):
        unit = text[-length:]
        count, i = 0, n - length
        while i >= 0 and text[i:i + length] == unit:
            count += 1
            i -= length
        if count >= min_repeats:
            return text[:n - length * (count - 1)]
    return text


def parse_spotting(text, width, height):
    """Items {"text", "box": [x1, y1, x2, y2]} in image pixels (int(v * size / 1000), as the reference).

    The text of an item is everything between the previous box and this one, so parentheses inside the
    text are kept; a trailing fragment without a complete box (truncated output) is not an item.
    """
    items, start = [], 0
    for match in _BOX.finditer(text):
        label = text[start:match.start()].strip()
        start = match.end()
        if not label:
            continue
        x1, y1, x2, y2 = (int(v) for v in match.groups())
        items.append({"text": label, "box": [int(x1 * width / 1000), int(y1 * height / 1000),
                                             int(x2 * width / 1000), int(y2 * height / 1000)]})
    return items


def _scaled(box, width, height):
    x1, y1, x2, y2 = box
    return [int(x1 * width / 1000), int(y1 * height / 1000), int(x2 * width / 1000), int(y2 * height / 1000)]


def _item(obj):
    """(text, [4 numbers]) of one answer element, or None when it is not {"box": [4 numbers], "text": str}."""
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        return None
    box = obj.get("box")
    if not isinstance(box, list) or len(box) != 4 or \
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in box):
        return None
    return obj["text"], box


def _salvage(body):
    """The JSON objects that parse on their own in a broken answer (truncated, a missing comma, stray text), in
    order: each '{' is tried as the start of an object; a parsed object is skipped over whole."""
    decoder, out, at = json.JSONDecoder(), [], body.find("{")
    while at >= 0:
        try:
            obj, end = decoder.raw_decode(body, at)
        except ValueError:
            at = body.find("{", at + 1)
            continue
        out.append(obj)
        at = body.find("{", end)
    return out


def parse_spotting_json(text, width, height):
    """(items, note) of a spotting_json answer: items {"text", "box": [x1, y1, x2, y2]} in image pixels
    (int(v * size / 1000), as the 1.0 parser), note None or one line saying what could not be read.

    Tolerant: a ```json fence is ignored; when the whole answer is no JSON array (cut by the token budget,
    malformed), every element that parses on its own is kept; elements without a 4-number box and a text are
    skipped and counted in the note."""
    body = text.strip()
    fence = re.fullmatch(r"```(?:json)?\s*([\s\S]*?)\s*(?:```)?", body)
    if fence:
        body = fence.group(1)
    try:
        elements = json.loads(body)
        whole = isinstance(elements, list)
    except ValueError:
        elements, whole = None, False
    if not whole:
        elements = elements if isinstance(elements, dict) else None
        elements = [elements] if elements is not None else _salvage(body)
    items, skipped = [], 0
    for obj in elements:
        parsed = _item(obj)
        if parsed is None:
            skipped += 1
            continue
        items.append({"text": parsed[0], "box": _scaled(parsed[1], width, height)})
    problems = []
    if not whole and body:
        problems.append("is not a complete JSON array (truncated or malformed)")
    if skipped:
        problems.append(f"has {skipped} element(s) without a 4-number box and a text")
    note = (f"the spotting_json answer {' and '.join(problems)}: kept {len(items)} box(es) that parse"
            if problems else None)
    return items, note
