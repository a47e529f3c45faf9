"""A small synthetic page for engine and server tests: a random light background with dark text rows."""

import numpy as np
from PIL import Image, ImageDraw


def page(w, h, seed):
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (w, h), tuple(int(c) for c in rng.integers(200, 256, 3)))
    d = ImageDraw.Draw(img)
    for i in range(max(1, h // 24)):
        d.text((4, 4 + 20 * i), f"row {i} {seed}", fill=tuple(int(c) for c in rng.integers(0, 90, 3)))
    return img
