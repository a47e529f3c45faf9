"""Synthetic pages: `text_page`, a light page with labelled text rows (the CLI, batch, export, cache and load tests:
distinct labels make distinct files); `page`, a random light background with dark text rows (engine and server
tests); `document_page`, a deterministic document-like page (title, paragraphs, a ruled table) for benchmarks and
the full-size tests; `layout_page`, a page drawn from layout blocks (the document pipeline's tests and benchmark,
and text regions for the batch benchmark); `article_pdf`, such pages as a PDF (the pipeline benchmark's)."""

import numpy as np
from PIL import Image, ImageDraw


def text_page(w, h, label=""):
    """w x h, light paper, a row "<label> line <i>" every 20 px (at least one)."""
    img = Image.new("RGB", (w, h), (248, 248, 240))
    d = ImageDraw.Draw(img)
    for i in range(max(1, h // 22)):
        d.text((4, 4 + 20 * i), f"{label} line {i}".strip(), fill=(0, 0, 0))
    return img


def page(w, h, seed):
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (w, h), tuple(int(c) for c in rng.integers(200, 256, 3)))
    d = ImageDraw.Draw(img)
    for i in range(max(1, h // 24)):
        d.text((4, 4 + 20 * i), f"row {i} {seed}", fill=tuple(int(c) for c in rng.integers(0, 90, 3)))
    return img


def document_page(width=768, height=1024, seed=0):
    """A document-like page of `width` x `height` (the benchmarks' 768 x 1024 by default)."""
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (width, height), (252, 252, 250))
    d = ImageDraw.Draw(img)
    words = ["model", "inference", "MindSpore", "Ascend", "document", "layout", "table", "formula",
             "recognition", "vision", "decoder", "token", "page", "result", "accuracy", "latency"]
    d.rectangle([40, 40, width - 40, 90], fill=(235, 235, 245))
    d.text((52, 55), "Quarterly report on OCR inference", fill=(10, 10, 10))
    y = 110
    for _ in range(18):
        line = " ".join(rng.choice(words, size=int(rng.integers(6, 11))))
        d.text((48, y), line, fill=(20, 20, 20))
        y += 22
    top = y + 20
    for r in range(7):
        d.line([48, top + 28 * r, width - 48, top + 28 * r], fill=(0, 0, 0))
        for c in range(4):
            d.text((56 + c * (width - 96) // 4, top + 28 * r + 8), f"{rng.integers(0, 999)}", fill=(0, 0, 0))
    for c in range(5):
        x = 48 + c * (width - 96) // 4
        d.line([x, top, x, top + 28 * 6], fill=(0, 0, 0))
    y = top + 28 * 6 + 30
    while y < height - 60:
        d.text((48, y), " ".join(rng.choice(words, size=9)), fill=(30, 30, 30))
        y += 22
    return img


# (label, box) in reading order: a typical one-column article page of 768 x 1024 (the pipeline benchmark's)
ARTICLE_BLOCKS = [("header", (48, 24, 420, 46)), ("doc_title", (96, 70, 672, 124)), ("text", (48, 150, 720, 300)),
                  ("paragraph_title", (48, 318, 320, 346)), ("text", (48, 356, 720, 470)),
                  ("display_formula", (190, 486, 580, 540)), ("table", (48, 560, 720, 760)),
                  ("image", (48, 780, 400, 950)), ("figure_title", (416, 840, 720, 880)),
                  ("text", (416, 890, 720, 950)), ("number", (370, 980, 400, 1000))]


def layout_page(blocks, width, height, seed=0):
    """A light page with what each (label, box) block shows: a filled picture for "image", ruled cells for "table",
    rows of random words (every 18 px) in every other block and in tables."""
    rng = np.random.default_rng(seed)
    words = ["inference", "document", "layout", "table", "formula", "MindSpore", "Ascend", "page", "region", "text"]
    img = Image.new("RGB", (width, height), (252, 252, 248))
    d = ImageDraw.Draw(img)
    for label, (x1, y1, x2, y2) in blocks:
        if label == "image":
            d.rectangle([x1, y1, x2, y2], fill=(90, 140, 200))
            continue
        if label == "table":
            for y in range(y1, y2 + 1, 40):
                d.line([(x1, y), (x2, y)], fill=(0, 0, 0))
            for x in range(x1, x2 + 1, 168):
                d.line([(x, y1), (x, y2)], fill=(0, 0, 0))
        for y in range(y1 + 4, y2 - 12, 18):
            d.text((x1 + 6, y), " ".join(rng.choice(words, size=max(1, (x2 - x1) // 70))), fill=(20, 20, 20))
    return img


def article_pdf(path, pages=10, width=768, height=1024):
    """A PDF of `pages` article pages (ARTICLE_BLOCKS drawn by layout_page, page i with seed i) at 96 dpi, so
    rendering it at 96 dpi gives width x height pixels with the blocks where ARTICLE_BLOCKS puts them."""
    images = [layout_page(ARTICLE_BLOCKS, width, height, seed=i) for i in range(pages)]
    images[0].save(path, "PDF", resolution=96.0, save_all=True, append_images=images[1:])
    return path
