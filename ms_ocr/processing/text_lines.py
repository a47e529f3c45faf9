"""Text lines of a crop, scaled to the height a line reader was trained on (NumPy/PIL).

A reader trained on lines of one geometry (the demo model: 28-40 px high, the text filling the height) reads a crop
of another (a line 80 px high with paper around it, a screenshot of 12-px text, a block of lines) as garbage. This
finds the crop's ink (pixels far from the paper colour, which is the median of the crop's border), splits it into
lines where a run of ink rows ends, and gives each line as an image of `height` px with the ink at the place and
size the training drew it, which the reader then reads one by one (ms_ocr/vlm.py, a checkpoint whose
preprocessor_config.json sets `text_line_height`). PaddleOCR's own pipeline does the same with its text detector
before its recogniser.
"""

import numpy as np
from PIL import Image

INK_SHARE = 0.4  # a pixel is ink when it is this share of the crop's strongest contrast away from the paper
MIN_CONTRAST = 30.0  # ... and at least this many grey levels (scan noise is up to ~12)
ROW_INK = 0.002  # a row with ink in fewer than this share of its pixels is paper (noise, JPEG ringing)
THIN = 0.35  # a run of ink rows thinner than this share of the tallest is a dot, accent or stroke of a neighbour
PAD_Y, PAD_X = 0.31, 0.18  # paper around a line's ink, in ink heights: the training's 34-px line with 22-px text
WIDTH_MULTIPLE = 112  # line images are widened with paper to a multiple of this (4 merged patches)


def _grey(img):
    return np.asarray(img.convert("L"), np.float32)


def paper_colour(img):
    """The RGB median of the crop's border pixels."""
    arr = np.asarray(img.convert("RGB"))
    border = np.concatenate([arr[0], arr[-1], arr[:, 0], arr[:, -1]])
    return tuple(int(v) for v in np.median(border, 0))


def ink_mask(img):
    """[H, W] bool: the pixels that are ink (far enough from the paper's grey level)."""
    g = _grey(img)
    paper = np.median(np.concatenate([g[0], g[-1], g[:, 0], g[:, -1]]))
    diff = np.abs(g - paper)
    return diff > max(MIN_CONTRAST, INK_SHARE * np.percentile(diff, 99.5))


def _runs(on):
    """[start, end) of each run of True in a 1-D bool array."""
    edges = np.diff(np.concatenate([[0], on.astype(np.int8), [0]]))
    return [[int(a), int(b)] for a, b in zip(np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0])]


def line_boxes(img):
    """(left, top, right, bottom) of each text line's ink in `img`, top to bottom; [] when it has no ink."""
    mask = ink_mask(img)
    rows = mask.sum(1)
    runs = _runs(rows >= max(1, ROW_INK * mask.shape[1]))
    if not runs:
        return []
    tallest = max(b - a for a, b in runs)
    merged = []
    for run in runs:  # a thin run joins the line it touches (an i's dot, an accent, a descender cut by noise)
        if merged and min(run[1] - run[0], merged[-1][1] - merged[-1][0]) < THIN * tallest \
                and run[0] - merged[-1][1] < THIN * tallest:
            merged[-1][1] = run[1]
        else:
            merged.append(run)
    boxes = []
    for top, bottom in merged:
        cols = np.nonzero(mask[top:bottom].any(0))[0]
        if len(cols):
            boxes.append((int(cols[0]), top, int(cols[-1]) + 1, bottom))
    return boxes


def line_crops(img, height, width_multiple=WIDTH_MULTIPLE):
    """Each text line of `img`, top to bottom, as (image, (x0, y0), scale): an RGB image `height` px high of the
    line's ink with PAD_Y / PAD_X of paper around it (outside the crop filled with its paper colour), widened with
    paper on the right to a multiple of `width_multiple` px (a few image sizes: few graph compilations); a point
    (x, y) of `img` lands at ((x - x0) * scale, (y - y0) * scale). [] when no ink is found."""
    boxes = line_boxes(img)
    if not boxes:
        return []
    rgb, paper = img.convert("RGB"), paper_colour(img)
    out = []
    for left, top, right, bottom in boxes:
        ink = bottom - top
        pad_y, pad_x = max(1, round(PAD_Y * ink)), max(1, round(PAD_X * ink))
        x0, y0, x1, y1 = left - pad_x, top - pad_y, right + pad_x, bottom + pad_y
        line = Image.new("RGB", (x1 - x0, y1 - y0), paper)
        line.paste(rgb.crop((max(0, x0), max(0, y0), min(img.width, x1), min(img.height, y1))),
                   (max(0, -x0), max(0, -y0)))
        scale = height / line.height
        line = line.resize((max(1, round(line.width * scale)), height), Image.BICUBIC)
        width = -(-line.width // width_multiple) * width_multiple
        if width != line.width:
            wide = Image.new("RGB", (width, height), paper)
            wide.paste(line, (0, 0))
            line = wide
        out.append((line, (x0, y0), scale))
    return out


def line_images(img, height, width_multiple=WIDTH_MULTIPLE):
    """The images of line_crops; [img] when no ink is found."""
    return [line for line, _, _ in line_crops(img, height, width_multiple)] or [img.convert("RGB")]
