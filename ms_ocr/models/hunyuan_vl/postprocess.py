"""HunyuanOCR output handling: the reference's long-output cleanup and the spotting parser.

Spotting output, after special tokens are skipped, is a sequence of `TEXT(x1,y1),(x2,y2)` items with
integer coordinates on a 0-1000 scale of the input image (x first), one per text line.
"""

import re

_BOX = re.compile(r"\((\d+),(\d+)\),\((\d+),(\d+)\)")


def clean_repeated_substrings(text, min_chars=8000, min_repeats=10):
    """HunyuanOCR's cleanup of runaway outputs: for a text of at least `min_chars` characters, find the
    shortest unit (2 .. len/10 chars) that ends the text and repeats back to back >= `min_repeats` times,
    and keep one copy of it. Shorter texts, or texts without such a tail, are returned unchanged."""
    n = len(text)
    if n < min_chars:
        return text
    for length in range(2, n // 10 + 1):
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
