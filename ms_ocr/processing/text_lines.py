"""Text lines of a crop, scaled to the height a line reader was trained on (NumPy/PIL).

A reader trained on lines of one geometry (the demo model: 28-40 px high, the text filling the height) reads a crop
of another (a line 80 px high with paper around it, a screenshot of 12-px text, a block of lines) as garbage. This
finds the crop's ink (pixels far from the paper colour, which is the median of the crop's border), splits it into
lines where a run of ink rows ends, and gives each line as an image of `height` px with the text at the place and
size the training drew it, which the reader then reads one by one (ms_ocr/vlm.py, a checkpoint whose
preprocessor_config.json sets `text_line_height`). PaddleOCR's own pipeline does the same with its text detector
before its recogniser.

A line's size is its font size, estimated from the height of its ink above the baseline (capitals, digits and
ascenders reach ~0.75 of the font size in the fonts measured): brackets, descenders and commas, which the ink's
full height counts, do not change it. The baseline is the last dense row of the line's row profile, taken along
the line's slant (a scan is rotated by a degree or two, which smears a level profile). Measured on 600 rendered
lines (11 fonts, 14-60 px, half scans rotated up to 1.2 degrees): this estimate varies by 4-5 % around the font
size, the ink's full height by 12 %.
"""

import numpy as np
from PIL import Image

INK_SHARE = 0.4  # a pixel is ink when it is this share of the crop's strongest contrast away from the paper
MIN_CONTRAST = 30.0  # ... and at least this many grey levels (scan noise is up to ~12)
ROW_INK = 0.002  # a row with ink in fewer than this share of its pixels is paper (noise, JPEG ringing)
VALLEY = 0.04  # ... and inside a run of ink rows, a row with less than this share of its densest row's ink
THIN = 0.35  # a run of ink rows thinner than this share of the tallest is a dot, accent or stroke of a neighbour
# The geometry of the training's lines (training/demo/data.py render_line): font size 0.66 of the line's height, the
# font's line box (ascent 0.93 + descent 0.24 of the size) centred, so the baseline is 0.345 sizes below the middle
SIZE_SHARE = 0.66
BASELINE_BELOW_MIDDLE = 0.345
ASCENT = 0.75  # ink above the baseline, in font sizes: capitals, digits, ascenders (DejaVu 0.73-0.76, Liberation 0.72)
PAD_X = 0.27  # paper left and right of a line's ink, in font sizes (the training's 6 px at 34)
DENSE = 0.5  # rows of the profile at least this share of its densest row are the body of the line (above the baseline)
EDGE = 0.02  # ... rows below this share are noise, not the top of the ink
SLANTS = np.tan(np.radians(np.linspace(-2.0, 2.0, 21)))  # slants tried for the profile (a level scan to 2 degrees)
BLOCK_AGREE = 0.25  # a block's line whose size is within this share of the block's median size takes the median
WIDTH_MULTIPLE = 112  # line images are widened with paper to a multiple of this (4 merged patches)


def _border(arr):
    """The pixels of an image's outermost rows and columns (the paper around a crop's text)."""
    return np.concatenate([arr[0], arr[-1], arr[:, 0], arr[:, -1]])


def _border_pixels(img):
    """The RGB pixels of an image's outermost rows and columns, cut from the image (no copy of all of it: a page
    of 64 Mpx would be 192 MB)."""
    w, h = img.size
    strips = [img.crop(box).convert("RGB") for box in ((0, 0, w, 1), (0, h - 1, w, h), (0, 0, 1, h), (w - 1, 0, w, h))]
    return np.concatenate([np.asarray(s).reshape(-1, 3) for s in strips])


def paper_colour(img):
    """The RGB median of the crop's border pixels."""
    return tuple(int(v) for v in np.median(_border_pixels(img), 0))


def ink_mask(img):
    """[H, W] bool: the pixels that are ink (far enough from the paper's grey level).

    Memory: one float32 copy of the grey levels at a time (|grey - paper| in place, its percentile taken in place)
    and the mask from the uint8 grey levels through a table of the same float32 differences, so the values compared
    are those of the plain expression while a large page holds less than half the plain expression's memory."""
    grey = np.asarray(img.convert("L"))
    paper = np.median(_border(grey).astype(np.float32))
    diff = grey.astype(np.float32)
    diff -= paper
    np.abs(diff, out=diff)
    limit = max(MIN_CONTRAST, INK_SHARE * np.percentile(diff, 99.5, overwrite_input=True))
    del diff
    table = np.abs(np.arange(256, dtype=np.float32) - paper) > limit  # the same float32 difference per grey level
    return table[grey]


def _runs(on):
    """[start, end) of each run of True in a 1-D bool array."""
    edges = np.diff(np.concatenate([[0], on.astype(np.int8), [0]]))
    return [[int(a), int(b)] for a, b in zip(np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0])]


def line_boxes(img, mask=None):
    """(left, top, right, bottom) of each text line's ink in `img`, top to bottom; [] when it has no ink. `mask`:
    its ink_mask when already computed."""
    mask = ink_mask(img) if mask is None else mask
    rows = mask.sum(1)
    runs = []
    for top, bottom in _runs(rows >= max(1, ROW_INK * mask.shape[1])):  # lines set solid touch (a bracket, a
        part = rows[top:bottom]  # descender): cut where the ink nearly stops between them (every row kept)
        dense = _runs(part > VALLEY * part.max())
        cuts = [top + (a[1] + b[0]) // 2 for a, b in zip(dense, dense[1:])]
        runs += [[a, b] for a, b in zip([top] + cuts, cuts + [bottom])]
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


def font_size(mask, box):
    """(font size, baseline y at the box's middle column) of the line of ink in `box` of `mask`, in pixels: the row
    profile along the slant that makes it sharpest, its baseline the end of its dense rows, its top the first row
    with ink."""
    left, top, right, bottom = box
    ys, xs = np.nonzero(mask[top:bottom, left:right])
    if not len(ys):
        return float(bottom - top), float(bottom)
    xs = xs - (right - left) / 2
    best = None
    for slant in SLANTS:  # the sharpest profile (most ink in fewest rows) is the line's own slant
        rows = np.round(ys - xs * slant).astype(np.int64)
        low = int(rows.min())
        hist = np.bincount(rows - low)
        score = float(np.dot(hist, hist))
        if best is None or score > best[0]:
            best = (score, hist, low)
    _, hist, low = best
    peak = hist.max()
    base = int(np.nonzero(hist >= DENSE * peak)[0][-1]) + 1
    first = int(np.nonzero(hist >= EDGE * peak)[0][0])
    return max(1.0, (base - first) / ASCENT), float(top + low + base)


class TooManyLines(ValueError):
    """A crop with more text lines than a caller reads in one request (found before any line is cut out)."""

    def __init__(self, count, limit):
        super().__init__(f"the image has {count} text lines; at most {limit} are read per request")
        self.count, self.limit = count, limit


def line_crops(img, height, width_multiple=WIDTH_MULTIPLE, max_lines=None):
    """Each text line of `img`, top to bottom, as (image, (x0, y0), scale): an RGB image `height` px high of the
    line at the training's geometry (font size SIZE_SHARE of the height, baseline BASELINE_BELOW_MIDDLE sizes below
    the middle, PAD_X of paper left and right), the rows of other lines and everything outside the crop painted
    with its paper colour, widened with paper on the right to a multiple of `width_multiple` px (a few image sizes:
    few graph compilations); a point (x, y) of `img` lands at ((x - x0) * scale, (y - y0) * scale). The lines of a
    block share its median font size where theirs is close to it. [] when no ink is found. More than `max_lines`
    lines: TooManyLines, before any is cut out."""
    mask = ink_mask(img)
    boxes = line_boxes(img, mask)
    if not boxes:
        return []
    if max_lines is not None and len(boxes) > max_lines:
        raise TooManyLines(len(boxes), max_lines)
    rgb = img if img.mode == "RGB" else img.convert("RGB")  # crops of it are read: no copy of a page in RGB
    paper = paper_colour(img)
    sizes = [font_size(mask, box) for box in boxes]
    median = float(np.median([size for size, _ in sizes]))
    out = []
    for (left, top, right, bottom), (size, base) in zip(boxes, sizes):
        if abs(size - median) <= BLOCK_AGREE * median:
            size = median
        tall = size / SIZE_SHARE
        pad_x = max(1, round(PAD_X * size))
        y0 = round(base - BASELINE_BELOW_MIDDLE * size - tall / 2)
        x0, x1, y1 = left - pad_x, right + pad_x, y0 + max(1, round(tall))
        line = Image.new("RGB", (x1 - x0, y1 - y0), paper)
        a, b = max(top, y0), min(bottom, y1)  # this line's own rows: a neighbour's ink stays out
        if b > a:
            line.paste(rgb.crop((max(0, x0), a, min(img.width, x1), b)), (max(0, -x0), a - y0))
        scale = height / line.height
        line = line.resize((max(1, round(line.width * scale)), height), Image.BICUBIC)
        width = -(-line.width // width_multiple) * width_multiple
        if width != line.width:
            wide = Image.new("RGB", (width, height), paper)
            wide.paste(line, (0, 0))
            line = wide
        out.append((line, (x0, y0), scale))
    return out


def line_images(img, height, width_multiple=WIDTH_MULTIPLE, max_lines=None):
    """The images of line_crops; [img] when no ink is found."""
    return [line for line, _, _ in line_crops(img, height, width_multiple, max_lines)] or [img.convert("RGB")]
