"""DeepSeek-OCR grounding output: `<|ref|>label<|/ref|><|det|>[[x1, y1, x2, y2], ...]<|/det|>` blocks (boxes on
a 0-999 scale of the input image), each followed by that block's text (shared by v1 and v2)."""

import ast
import os
import re

_BLOCK = re.compile(r"<\|ref\|>(.*?)<\|/ref\|><\|det\|>(.*?)<\|/det\|>", re.DOTALL)


def _boxes(det, width, height):
    try:
        raw = ast.literal_eval(det.strip())
    except (ValueError, SyntaxError):
        return []
    if raw and not isinstance(raw[0], (list, tuple)):
        raw = [raw]
    out = []
    for box in raw:
        if isinstance(box, (list, tuple)) and len(box) == 4 and all(isinstance(v, (int, float)) for v in box):
            x1, y1, x2, y2 = box
            out.append([int(x1 / 999 * width), int(y1 / 999 * height), int(x2 / 999 * width), int(y2 / 999 * height)])
    return out


def parse_grounding(text, width, height):
    """(items, markdown): items {"label", "boxes" in pixels, "text" up to the next block}; markdown with the
    markup removed, `image` blocks replaced by `![](images/<n>.jpg)` links as the official scripts do."""
    items, matches = [], list(_BLOCK.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        items.append({"label": m.group(1).strip(), "boxes": _boxes(m.group(2), width, height),
                      "text": text[m.end():end].strip()})
    markdown, figure = [], 0
    last = 0
    for m in matches:
        markdown.append(text[last:m.start()])
        if m.group(1).strip() == "image":
            markdown.append(f"![](images/{figure}.jpg)\n")
            figure += 1
        last = m.end()
    markdown.append(text[last:])
    md = "".join(markdown).replace("\\coloneqq", ":=").replace("\\eqqcolon", "=:")
    return items, md


def save_figures(image, items, folder):
    """Crop every box of `image` blocks to folder/images/<n>.jpg (the markdown's links); returns the paths."""
    paths, n = [], 0
    for item in items:
        if item["label"] != "image":
            continue
        for box in item["boxes"][:1]:
            x1, y1, x2, y2 = box
            if x2 > x1 and y2 > y1:
                os.makedirs(os.path.join(folder, "images"), exist_ok=True)
                path = os.path.join(folder, "images", f"{n}.jpg")
                image.convert("RGB").crop((x1, y1, x2, y2)).save(path)
                paths.append(path)
        n += 1
    return paths
