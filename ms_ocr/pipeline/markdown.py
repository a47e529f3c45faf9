"""A page's blocks -> Markdown and JSON, in reading order, as PaddleX 3.7.2 writes them for PaddleOCR-VL
(paddleocr_vl/result.py, common/result/converter/markdown_format_funcs.py and markdown_converter.py, pretty=True):
doc_title "# ", paragraph titles "#" per numbering level plus one, formulas as the recogniser wrote them (the $$ come
from the LaTeX clean-up), tables as styled HTML, pictures as centred <img> links, captions centred; headers,
footers, page numbers, footnotes and side text left out by default. Every block with a Markdown form adds
"\\n\\n" + its text, also when that text is empty (the merged members of a group)."""

import re
from dataclasses import dataclass

# markdown_ignore_labels of every PaddleOCR-VL yaml: left out of the Markdown unless asked for (still in the JSON)
IGNORED_LABELS = ("number", "footnote", "header", "header_image", "footer", "footer_image", "aside_text")
# labels without a reading number (result.py SKIP_ORDER_LABELS; the ignored labels are skipped too)
UNNUMBERED_LABELS = ("figure_title", "vision_footnote", "image", "chart", "table", "header", "header_image",
                     "footer", "footer_image", "footnote", "aside_text")
PICTURE_LABELS = ("image", "header_image", "footer_image", "seal", "chart")

_CJK_NUMERALS = "一二三四五六七八九十百千万亿零壹贰叁肆伍陆柒捌玖拾"
# a title's numbering: 1 / 1.2.3 / 1. / 1、, (1) / （一）, 一、, or a Roman numeral I..X followed by "." or a space
_NUMBERING = re.compile(r"^\s*((?:[1-9][0-9]*(?:\.[1-9][0-9]*)*[\.、]?|[\(\（](?:[1-9][0-9]*|[" + _CJK_NUMERALS +
                        r"]+)[\)\）]|[" + _CJK_NUMERALS + r"]+[、\.]?|(?:I|II|III|IV|V|VI|VII|VIII|IX|X)(?:\.|\s)))"
                        r"(\s*)(.*)$")
_CENTRED = '<div style="text-align: center;">{}</div>\n'
_CELL = "style='text-align: center; word-wrap: break-word;'"


@dataclass
class Block:
    """One block of a page. `order`: the 1-based reading number (None for unnumbered labels); `image`: the picture
    file (relative to the Markdown) of blocks kept as pictures; `points`: the outline in page pixels (V3/V4);
    `group`: the index of the first block of the merged group it belongs to (its own index when not merged)."""
    index: int
    label: str
    box: tuple
    score: float
    task: str = None
    content: str = ""
    order: int = None
    image: str = None
    error: str = None
    points: tuple = None
    group: int = None

    def as_dict(self):
        out = {"block_id": self.index, "label": self.label, "box": [int(v) for v in self.box],
               "score": round(float(self.score), 5), "order": self.order,
               "group_id": self.index if self.group is None else self.group, "content": self.content}
        if self.points is not None:
            out["points"] = [[round(float(x), 2), round(float(y), 2)] for x, y in self.points]
        if self.image:
            out["image"] = self.image
        if self.error:
            out["error"] = self.error
        return out


def number_blocks(blocks, ignore=IGNORED_LABELS):
    """Reading numbers 1, 2, ... for the blocks in order, skipping the unnumbered and the ignored labels."""
    n = 0
    for b in blocks:
        if b.label in UNNUMBERED_LABELS or b.label in ignore:
            b.order = None
        else:
            n += 1
            b.order = n
    return blocks


def _one_line(text):
    return text.replace("-\n", "").replace("\n", " ")


def _title(text):
    """`#` per numbering level plus one: the numbering is rewritten "NUM text", a trailing "." goes, and the level
    is one more than the dots anywhere in the title (PaddleX format_title)."""
    m = _NUMBERING.match(text)
    if m:
        text = m.group(1).strip() + " " + m.group(3).lstrip()
    text = text.rstrip(".")
    return _one_line("#" * (text.count(".") + 2) + " " + text)


def _paragraphs(text):
    return text.replace("\n\n", "\n").replace("\n", "\n\n")


def _first_line_heading(text, words, splitter, heading):
    parts = text.split(splitter)
    for i, part in enumerate(parts):
        if part.strip():
            if part.lower() in words:
                parts[i] = heading(part)
            break
    return splitter.join(parts)


def _table(html):
    html = html.replace("<table>", "<table border=1 style='margin: auto; word-wrap: break-word;'>")
    return "\n" + html.replace("<th>", f"<th {_CELL}>").replace("<td>", f"<td {_CELL}>")


def _chart_table(text):
    """A recognised chart ("|"-separated rows, the first the header) as an HTML table."""
    lines = text.split("\n")
    cells = lambda line, tag: "".join(f"<{tag} style='text-align: center;'>{c.strip()}</{tag}>"  # noqa: E731
                                      for c in line.split("|"))
    rows = "".join(f"    <tr>{cells(line, 'td')}</tr>\n" for line in lines[1:])
    return (f"<table border=1 style='margin: auto; width: max-content;'>\n  <thead><tr>{cells(lines[0], 'th')}"
            f"</tr></thead>\n  <tbody>\n{rows}  </tbody>\n</table>")


def _picture(b, page_width):
    if b.image is None:
        return _CENTRED.format("")
    width = int((b.box[2] - b.box[0]) / page_width * 100)
    return _CENTRED.format(_one_line(f'<img src="{b.image}" alt="Image" width="{width}%" />'))


def block_markdown(b, page_width, charts=False):
    """Markdown of one block, or None when its label has no Markdown form (formula_number, unknown labels)."""
    text, label = b.content, b.label
    if label in PICTURE_LABELS and not (label == "chart" and charts):
        return _picture(b, page_width)
    if label == "chart":
        return _chart_table(text)
    if label == "doc_title":
        return _one_line("# " + text)
    if label == "paragraph_title":
        return _title(text)
    if label in ("text", "vertical_text", "reference_content", "vision_footnote"):
        return _paragraphs(text)
    if label == "figure_title":
        return _CENTRED.format(_one_line(text))
    if label == "abstract":
        return _first_line_heading(text, ("摘要", "abstract"), " ", lambda w: f"## {w}\n")
    if label == "reference":
        return _first_line_heading(text, ("参考文献", "references"), "\n", lambda w: f"## {w}")
    if label == "content":
        return text.replace("-\n", "  \n").replace("\n", "  \n")
    if label == "algorithm":
        return text.strip("\n")
    if label in ("display_formula", "inline_formula"):
        return text
    if label == "table":
        return _table(text)
    if label in ("number", "footnote", "header", "footer", "aside_text"):
        return text
    return None


def page_markdown(blocks, page_width, ignore=IGNORED_LABELS, charts=False):
    md = ""
    for b in blocks:
        if b.label in ignore:
            continue
        part = block_markdown(b, page_width, charts)
        if part is not None:
            md = md + "\n\n" + part if md else part
    return md
