"""What the pipeline does with each layout block (PaddleX 3.7.2's PaddleOCR-VL pipeline): which region task its
label calls for, how the region is cut from the page (CropByBoxes: outside a block's outline the crop is white), the
formula crop (crop_margin) and how the recogniser's text is cleaned (truncate_repetitive_content, LaTeX delimiters,
OTSL tables)."""

import numpy as np
from PIL import Image

from ms_ocr.pipeline.otsl import is_otsl, otsl_to_html

# kept as picture files, never recognised (PaddleX image_labels with seal recognition off); chart joins them unless
# chart recognition is on
IMAGE_LABELS = ("image", "header_image", "footer_image", "seal")
FORMULA_LABELS = ("display_formula", "inline_formula")
# truncate_repetitive_content looks at an answer only from this many characters (PaddleX's min_count)
REPETITION_MIN_CHARS = {"table": 5000}
REPETITION_MIN_CHARS_DEFAULT = 50


def image_labels(charts=False):
    """Labels kept as pictures: never sent to the recogniser, and never merged with neighbours."""
    return IMAGE_LABELS + (() if charts else ("chart",))


def region_task(label, charts=False):
    """The recogniser task of a block: "text", "table", "formula", "chart", or None (kept as an image)."""
    if label in image_labels(charts):
        return None
    if label in ("table", "chart"):
        return label
    if label in FORMULA_LABELS:
        return "formula"
    return "text"  # titles, paragraphs, captions, headers/footers, formula numbers (Markdown leaves some out)


def pixel_box(box):
    """Integer crop box: coordinates truncated, as the reference crops."""
    return tuple(int(v) for v in box)


def crop(page, box, points=None):
    """The block's pixels from the page (PIL image or an RGB array), as a PIL image, or None when the box is empty
    after truncation. With `points` (the block's outline in page pixels) every pixel outside the outline is white:
    the outline is truncated to integers, shifted to the crop and filled with cv2.fillPoly (PaddleX CropByBoxes)."""
    import cv2
    x1, y1, x2, y2 = pixel_box(box)
    arr = np.asarray(page.convert("RGB")) if isinstance(page, Image.Image) else page
    region = np.array(arr[max(y1, 0):max(y2, 0), max(x1, 0):max(x2, 0)])
    if region.shape[0] == 0 or region.shape[1] == 0:
        return None
    if points is not None:
        outline = np.asarray(points, np.float64).astype(np.int32).reshape(-1, 1, 2) - np.array([x1, y1], np.int32)
        inside = np.zeros(region.shape[:2], np.int32)
        cv2.fillPoly(inside, [outline], 1)
        region[~inside.astype(bool)] = 255
    return Image.fromarray(region)


def trim_to_ink(region):
    """A formula crop cut down to its ink (PaddleX crop_margin): grey levels stretched to 0..255 through an integer
    table, pixels at or below 200 are ink, the crop is their bounding box. Unchanged when flat, without ink, or when
    the ink box is not more than 2 px in both directions."""
    import cv2
    gray = cv2.cvtColor(np.asarray(region.convert("RGB")), cv2.COLOR_RGB2GRAY)
    lo, hi = int(gray.min()), int(gray.max())
    if hi == lo:
        return region
    table = np.zeros(256, np.uint8)
    for v in range(lo, hi + 1):
        table[v] = int((v - lo) / (hi - lo) * 255)
    _, ink = cv2.threshold(cv2.LUT(gray, table), 200, 255, cv2.THRESH_BINARY_INV)
    coords = cv2.findNonZero(ink)
    if coords is None:
        return region
    x, y, w, h = cv2.boundingRect(coords)
    return region.crop((x, y, x + w, y + h)) if w > 2 and h > 2 else region


def _repeating_suffix(s, min_len=8, min_repeats=5):
    for size in range(len(s) // min_repeats, min_len - 1, -1):
        unit = s[-size:]
        if s.endswith(unit * min_repeats):
            count, rest = 0, s
            while rest.endswith(unit):
                rest, count = rest[:-size], count + 1
            return s[:len(s) - count * size], unit, count
    return None


def _shortest_period(s):
    for size in range(1, len(s) // 2 + 1):
        if len(s) % size == 0 and s[:size] * (len(s) // size) == s:
            return s[:size]
    return None


def truncate_repetition(text, min_chars=REPETITION_MIN_CHARS_DEFAULT, line_repeats=10, char_repeats=10, min_len=10):
    """Cut a generation that degenerated into repetition (PaddleX truncate_repetitive_content), looked at only from
    `min_chars` characters: a line over 100 characters ending in >= 5 copies of a >= 8-character phrase covering
    over half of it keeps its prefix; a line that is one unit repeated >= 10 times becomes the unit; >= 10 lines of
    which one makes up >= 80 % become that line."""
    if len(text) < min_chars:
        return text
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
        top = max(dict.fromkeys(lines), key=lines.count)  # the first of the most frequent, as Counter ranks ties
        count = lines.count(top)
        if count >= line_repeats and count / len(lines) >= 0.8:
            return top
    return text


def normalise_math(text, label):
    """LaTeX delimiters as PaddleX 3.7 writes them: when the text holds \\( \\) or \\[ \\] pairs, every $ goes,
    \\( -> " $ ", \\) -> " $", doubled \\[\\[ \\]\\] become single, \\[ and \\] -> " $$ " (a formula_number keeps
    no $)."""
    if ("\\(" in text and "\\)" in text) or ("\\[" in text and "\\]" in text):
        text = text.replace("$", "").replace("\\(", " $ ").replace("\\)", " $")
        text = text.replace("\\[\\[", "\\[").replace("\\]\\]", "\\]").replace("\\[", " $$ ").replace("\\]", " $$ ")
        if label == "formula_number":
            text = text.replace("$", "")
    return text


def clean(text, label, task):
    """Recogniser output -> block content."""
    text = truncate_repetition(text, REPETITION_MIN_CHARS.get(label, REPETITION_MIN_CHARS_DEFAULT))
    text = normalise_math(text, label)
    if task == "table" and is_otsl(text):
        text = otsl_to_html(text) or text
    return text
