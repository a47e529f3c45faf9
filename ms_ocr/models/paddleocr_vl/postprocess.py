"""PaddleOCR-VL-1.5's spotting answer parsed into boxes. Reference: the output format PaddleX 3.4's pipeline parses
(docs/model-versions.md section 3.1): each item's text and a quadrilateral of four points as <|LOC_n|> tokens,
n in 0..1000 normalised to the image, x and y alternating; either annotated
(`<|TEXT_START|>text<|TEXT_END|><|LOC_BEGIN|>` 8 LOC tokens `<|LOC_END|>`) or plain (`text` then 8 LOC tokens)."""

import re

_ANNOTATED = re.compile(r"<\|TEXT_START\|>(.*?)<\|TEXT_END\|>\s*<\|LOC_BEGIN\|>(.*?)<\|LOC_END\|>", re.S)
_LOC = re.compile(r"<\|LOC_(\d+)\|>")
_MARKER = re.compile(r"<\|(?:TEXT_START|TEXT_END|LOC_BEGIN|LOC_END|LOC_SEP)\|>")
_SPECIAL = re.compile(r"<\|[A-Za-z_]+\|>|</s>|<s>")


def _item(text, values, width, height):
    """{"text", "poly": four [x, y] in image pixels, "box": their bounding [x1, y1, x2, y2] (ints)}."""
    points = [[values[j] / 1000.0 * width, values[j + 1] / 1000.0 * height] for j in range(0, 8, 2)]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return {"text": text, "poly": [[round(x, 2), round(y, 2)] for x, y in points],
            "box": [int(min(xs)), int(min(ys)), int(round(max(xs))), int(round(max(ys)))]}


def parse_spotting(text, width, height):
    """Items {"text", "poly", "box"} in pixels of the image as given (width x height; the 2x upscale for the model
    does not change the normalised coordinates). Annotated items first; without any, the plain form: each run of
    8 LOC tokens closes an item whose text is what came since the previous one. A box with fewer than 8 values
    (cut-off output) is no item; further values in one box are ignored, as the reference does."""
    items = []
    for match in _ANNOTATED.finditer(text):
        values = [int(v) for v in _LOC.findall(match.group(2))]
        if len(values) >= 8:
            items.append(_item(match.group(1).strip(), values[:8], width, height))
    if items:
        return items
    locs = list(_LOC.finditer(text))
    start, i = 0, 0
    while i + 8 <= len(locs):
        group = locs[i:i + 8]
        if any(text[a.end():b.start()].strip() for a, b in zip(group, group[1:])):
            i += 1  # text between two of the eight: not one box; the run starts later
            continue
        label = _SPECIAL.sub("", _MARKER.sub("", text[start:group[0].start()])).strip()
        if label:
            items.append(_item(label, [int(m.group(1)) for m in group], width, height))
        start, i = group[-1].end(), i + 8
    return items


def spotting_text(items):
    """The items' texts, one per line."""
    return "\n".join(item["text"] for item in items)
