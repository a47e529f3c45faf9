"""Synthetic pages: `text_page`, a light page with labelled text rows (the CLI, batch, export, cache and load tests:
distinct labels make distinct files); `page`, a random light background with dark text rows (engine and server
tests); `document_page`, a deterministic document-like page (title, paragraphs, a ruled table) for benchmarks and
the full-size tests."""

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
