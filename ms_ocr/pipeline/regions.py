"""What the pipeline does with each layout block (PaddleOCR-VL pipeline semantics): which region task its label
calls for, how the region is cut from the page, and how the recogniser's text is cleaned."""

import numpy as np

from ms_ocr.pipeline.otsl import is_otsl, otsl_to_html

# kept as picture files, never recognised; chart joins them unless chart recognition is on
IMAGE_LABELS = ("image", "header_image", "footer_image", "seal")
FORMULA_LABELS = ("display_formula", "inline_formula")


def region_task(label, charts=False):
    """The recogniser task of a block: "text", "table", "formula", "chart", or None (kept as an image)."""
    if label in IMAGE_LABELS or (label == "chart" and not charts):
        return None
    if label == "table":
        return "table"
    if label == "chart":
        return "chart"
    if label in FORMULA_LABELS:
        return "formula"
    return "text"  # titles, paragraphs, captions, headers/footers (recognised; Markdown leaves some out)


def pixel_box(box):
    """Integer crop box: coordinates truncated, as the reference crops."""
    return tuple(int(v) for v in box)


def crop(page, box):
    """The block's pixels from the original page, or None when the box is empty after truncation."""
    x1, y1, x2, y2 = pixel_box(box)
    if x2 <= x1 or y2 <= y1:
        return None
    return page.crop((x1, y1, x2, y2))


def trim_to_ink(region):
    """A formula crop cut down to its ink: grey levels stretched to 0..255, pixels darker than 200 are ink, the
    crop is their bounding box (unchanged when flat or without ink)."""
    gray = np.asarray(region.convert("L"), np.float64)
    lo, hi = gray.min(), gray.max()
    if hi == lo:
        return region
    ink = ((gray - lo) / (hi - lo) * 255).astype(np.uint8) <= 200
    ys, xs = np.nonzero(ink)
    if len(xs) == 0:
        return region
    return region.crop((int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1))


def _repeating_suffix(s, min_len=8, min_repeats=5):
    for size in range(len(s) // min_repeats, min_len - 1, -1):
        unit = s[-size:]
        if s.endswith(unit * min_repeats):
            count, rest = 0, s
            while rest.endswith(unit):
                rest, count = rest[:-size], count + 1
            return rest, unit, count
    return None


def _shortest_period(s):
    for size in range(1, len(s) // 2 + 1):
        if len(s) % size == 0 and s[:size] * (len(s) // size) == s:
            return s[:size]
    return None


def truncate_repetition(text, line_repeats=10, char_repeats=10, min_len=10):
    """Cut a generation that degenerated into repetition (the pipeline's truncate_repetitive_content): a long line
    ending in >= 5 copies of a >= 8-character phrase covering over half of it keeps its prefix; a line that is one
    unit repeated >= 10 times becomes the unit; >= 10 lines of which one makes up >= 80 % become that line."""
    s = text.strip()
    if not s:
        return text
    if "\n" not in s and len(s) > 100:
        found = _repeating_suffix(s)
        if found and len(found[1]) * found[2] > 0.5 * len(s):
            return found[0]
    if "\n" not in s and len(s) > min_len:
        unit = _shortest_period(s)
        if unit and len(s) // len(unit) >= char_repeats:
            return unit
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    if len(lines) >= line_repeats:
        top = max(set(lines), key=lines.count)
        count = lines.count(top)
        if count >= line_repeats and count / len(lines) >= 0.8:
            return top
    return text


def normalise_math(text, label):
    """LaTeX delimiters as the pipeline writes them: when the text holds \\( \\) or \\[ \\] pairs, stray $ go and
    \\( \\) become $ ... $, \\[ \\] become $$ ... $$ (a formula_number keeps no $)."""
    if ("\\(" in text and "\\)" in text) or ("\\[" in text and "\\]" in text):
        text = text.replace("$", "")
        text = text.replace("\\(", " $ ").replace("\\)", " $ ").replace("\\[", " $$ ").replace("\\]", " $$ ")
        if label == "formula_number":
            text = text.replace("$", "")
    return text


def clean(text, label, task):
    """Recogniser output -> block content."""
    text = truncate_repetition(text)
    text = normalise_math(text, label)
    if task == "table" and is_otsl(text):
        text = otsl_to_html(text) or text
    return text
