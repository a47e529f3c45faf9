"""A page's blocks -> Markdown and JSON, in reading order (the PaddleOCR-VL pipeline's Markdown conventions:
doc_title "# ", section titles "##" plus one "#" per numbering level, formulas as $$...$$, tables as HTML, pictures
as centred <img> links, captions centred, headers/footers/page numbers left out by default)."""

import re
from dataclasses import dataclass

# left out of the Markdown unless asked for (still recognised and in the JSON)
IGNORED_LABELS = ("number", "footnote", "header", "header_image", "footer", "footer_image", "aside_text")
# labels that get a reading number in the JSON and the drawing (pictures, tables, captions do not)
ORDERED_LABELS = ("text", "inline_formula", "display_formula", "algorithm", "reference", "reference_content",
                  "content", "abstract", "paragraph_title", "doc_title", "vertical_text", "number", "footnote",
                  "header", "header_image", "footer", "footer_image", "aside_text")

_NUMBERING = re.compile(r"^\s*((?:\d+|[A-Z])(?:\.\d+)+|\d+)\.?\s")


@dataclass
class Block:
    """One recognised region of a page. `order` is the 1-based reading number (None for unnumbered labels);
    `image` the picture file (relative to the Markdown) of blocks kept as pictures."""
    index: int
    label: str
    box: tuple
    score: float
    task: str = None
    content: str = ""
    order: int = None
    image: str = None
    error: str = None

    def as_dict(self):
        out = {"block_id": self.index, "label": self.label, "box": [int(v) for v in self.box],
               "score": round(float(self.score), 5), "order": self.order, "content": self.content}
        if self.image:
            out["image"] = self.image
        if self.error:
            out["error"] = self.error
        return out


def number_blocks(blocks):
    n = 0
    for b in blocks:
        if b.label in ORDERED_LABELS:
            n += 1
            b.order = n
        else:
            b.order = None
    return blocks


def _one_line(text):
    return text.replace("-\n", "").replace("\n", " ")


def _title_level(title):
    """Heading depth of a section title from its numbering: "3 Results" and "Results" -> 1, "3.2 Setup" -> 2."""
    m = _NUMBERING.match(title)
    return m.group(1).count(".") + 1 if m else 1


def _paragraphs(text):
    return text.replace("\n\n", "\n").replace("\n", "\n\n")


def _centred(text):
    return f'<div style="text-align: center;">{_one_line(text)}</div>\n'


def _table(html):
    html = html.replace("<html>", "").replace("</html>", "").replace("<body>", "").replace("</body>", "")
    html = html.replace("<table>", "<table border=1 style='margin: auto; width: max-content;'>")
    return "\n" + html.replace("<td>", "<td style='text-align: center;'>").replace("<th>",
                                                                                  "<th style='text-align: center;'>")


def _first_word_heading(text, words):
    parts = text.split(" ")
    for i, part in enumerate(parts):
        if part.strip():
            if part.lower() in words:
                parts[i] = f"## {part}\n"
            break
    return " ".join(parts)


def _chart(text):
    """A recognised chart ("|"-separated rows) as a Markdown table; other answers as they are."""
    lines = [line for line in text.strip().split("\n") if line.strip()]
    if not lines or "|" not in lines[0]:
        return text
    cols = len(lines[0].strip("|").split("|"))
    lines = [f"|{line.strip('|')}|" for line in lines]
    return "\n".join(lines[:1] + ["|" + "|".join(["---"] * cols) + "|"] + lines[1:])


def block_markdown(b, page_width):
    """Markdown of one block, or None when its label has no Markdown form."""
    text, label = b.content, b.label
    if b.image is not None:
        width = int((b.box[2] - b.box[0]) / page_width * 100) if page_width else 100
        return _centred(f'<img src="{b.image}" alt="Image" width="{width}%" />')
    if label == "doc_title":
        return "# " + _one_line(text)
    if label == "paragraph_title":
        title = _one_line(text).strip().rstrip(".")
        return "#" * (_title_level(title) + 1) + " " + title
    if label in ("text", "vertical_text", "reference_content", "vision_footnote"):
        return _paragraphs(text)
    if label == "figure_title":
        return _centred(text)
    if label == "abstract":
        return _first_word_heading(text, ("abstract", "摘要"))
    if label == "content":
        return text.replace("-\n", "  \n").replace("\n", "  \n")
    if label == "algorithm":
        return text.strip("\n")
    if label in ("display_formula", "inline_formula"):
        t = text.strip()
        return t if t.startswith("$") else f"$${t}$$"
    if label == "table":
        return _table(text)
    if label == "chart":
        return _chart(text)
    if label in ("number", "footnote", "header", "footer", "aside_text"):
        return text
    return None  # formula_number (shown with its formula only in the reference), unknown labels


def page_markdown(blocks, page_width, ignore=IGNORED_LABELS):
    parts = []
    for b in blocks:
        if b.label in ignore:
            continue
        md = block_markdown(b, page_width)
        if md is not None and md.strip():
            parts.append(md)
    return "\n\n".join(parts)
