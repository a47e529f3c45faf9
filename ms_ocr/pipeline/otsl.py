"""OTSL table markup (what PaddleOCR-VL answers to "Table Recognition:") -> an HTML table.

OTSL writes a table row by row with one tag per grid cell: <fcel> a cell with text, <ecel> an empty cell, <lcel> the
cell continues the one to its left, <ucel> continues the one above, <xcel> both; <nl> ends a row. Ragged rows are
first made rectangular (padded with empty cells or cut) at the width closest to all rows' lengths, never cutting
a row's last text cell, as the PaddleOCR-VL pipeline does."""

import html
import re

TAGS = ("<fcel>", "<ecel>", "<lcel>", "<ucel>", "<xcel>", "<nl>")
_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in TAGS) + ")")


def is_otsl(text):
    return "<fcel>" in text or "<ecel>" in text


def parse_rows(text):
    """[[(tag, text), ...] per row]; text before the first tag is ignored."""
    rows, row, current = [], [], None
    for piece in _SPLIT.split(text.strip()):
        if piece == "<nl>":
            if current:
                row.append(current)
            if row:
                rows.append(row)
            row, current = [], None
        elif piece in TAGS:
            if current:
                row.append(current)
            current = [piece, ""]
        elif current is not None:
            current[1] += piece
    if current:
        row.append(current)
    if row:
        rows.append(row)
    return [[(tag, body) for tag, body in r] for r in rows]


def rectangular(rows):
    if not rows:
        return rows
    lowest = max(max((i + 1 for i, (tag, _) in enumerate(r) if tag == "<fcel>"), default=0) for r in rows)
    longest = max(len(r) for r in rows)
    width = min(range(lowest, max(lowest, longest) + 1), key=lambda w: (sum(abs(len(r) - w) for r in rows), w))
    return [r[:width] + [("<ecel>", "")] * (width - len(r)) for r in rows]


def otsl_to_html(text):
    """HTML <table> (rowspan/colspan, escaped cell text), or "" when the markup has no cells."""
    grid = rectangular(parse_rows(text))
    if not grid or not grid[0]:
        return ""
    n_rows, n_cols = len(grid), len(grid[0])
    body = []
    for r in range(n_rows):
        cells = []
        for c in range(n_cols):
            tag, content = grid[r][c]
            if tag not in ("<fcel>", "<ecel>"):
                continue  # part of a spanning cell
            colspan = 1
            while c + colspan < n_cols and grid[r][c + colspan][0] in ("<lcel>", "<xcel>"):
                colspan += 1
            rowspan = 1
            while r + rowspan < n_rows and grid[r + rowspan][c][0] in ("<ucel>", "<xcel>"):
                rowspan += 1
            attrs = (f' rowspan="{rowspan}"' if rowspan > 1 else "") + (f' colspan="{colspan}"' if colspan > 1 else "")
            cells.append(f"<td{attrs}>{html.escape(content.strip())}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return "<table>" + "".join(body) + "</table>"
