"""Synthetic printed-text lines for the demo model (scripts/train_demo.py): text generator, fonts, renderer with
scan augmentations, and the example images. Pillow and NumPy only; everything is a pure function of its seed.

Fonts ship with the repository (training/demo/fonts.py, font_files/): DejaVu (training) and Liberation (the unseen
fonts the accuracy gate reports), as Debian's fonts-dejavu and fonts-liberation2 packages hold them. `python -m training.demo.data --examples examples/` writes the
example images.
"""

import argparse
import functools
import io
import os
import random
import string

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from training.demo.fonts import FONT_PACKAGES, TRAIN_FONTS, UNSEEN_FONT, UNSEEN_FONTS, font_path, \
    missing_fonts  # noqa: F401 (the demo data's fonts, read through this module by its users)

LINE_HEIGHT = (28, 40)  # rendered line heights: smart_resize maps all of them to one 28-px row of patches
MAX_CHARS = 40
MARGIN_PX = 224  # widest blank right margin of a training line (the accuracy gate pads lines to a multiple of 224)

_WORDS = ("the of and to in is was for on that with as by at from it an are were which this be or has had not but "
          "have one their also its first new after who been two they other page table total invoice date amount "
          "account number balance payment order customer address street city phone email report year month "
          "price quantity item description tax net due paid received shipped office company limited service "
          "project summary section figure chapter note reference version update status approved pending "
          "model text image document scan line word value data result error system file record name title "
          "Monday Tuesday Friday January March April June August October December north south east west "
          "water light house market school health energy travel garden window river morning evening "
          # doubled and narrow letters (ll, tt, ff, il, li): with only the words above, the model read `little`
          # as `itttle`, `fill` as `fil` and `Please` as `Piease`
          "all will well call small still till fill full bill hall shall little letter better attention office "
          "effect support follow allow million billion illegal official William Phillips Elliott Illinois Billy "
          "list link limit liability filled billing collection college dollar skill fifty fifth lift split").split()
_MONTHS = ("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec").split()
_CURRENCIES = ("$", "EUR ", "USD ", "GBP ", "")
_PUNCT = ".,:;!?"


def _pseudo_word(rng):
    """Letters without meaning, so the model has to read characters rather than recall words."""
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))


def _number(rng):
    kind = rng.random()
    if kind < 0.3:
        return str(rng.randint(0, 99999))
    if kind < 0.5:
        return f"{rng.randint(0, 9999)}.{rng.randint(0, 99):02d}"
    if kind < 0.7:
        return f"{rng.randint(1, 999)},{rng.randint(0, 999):03d}"
    if kind < 0.85:
        return f"{rng.randint(0, 100)}%"
    return f"#{rng.randint(1, 9999)}"


def _date(rng):
    y, m, d = rng.randint(1950, 2049), rng.randint(1, 12), rng.randint(1, 28)
    return rng.choice((f"{y}-{m:02d}-{d:02d}", f"{d:02d}/{m:02d}/{y}", f"{d} {_MONTHS[m - 1]} {y}",
                       f"{_MONTHS[m - 1]} {d}, {y}", f"{m}/{d}/{y % 100:02d}"))


def _amount(rng):
    value = f"{rng.randint(0, 99999):,}.{rng.randint(0, 99):02d}"
    cur = rng.choice(_CURRENCIES)
    return rng.choice((f"{cur}{value}", f"-{cur}{value}", f"{value} EUR"))


def _code(rng):
    """Codes, references, times, and letters after digits as in house numbers, rooms and postcodes (221B, 4B,
    NW1 6XE: without them the model read `221B` as `2218`, a digit being all it had seen after digits)."""
    letters = "".join(rng.choice(string.ascii_uppercase) for _ in range(rng.randint(1, 3)))
    return rng.choice((f"{letters}-{rng.randint(0, 9999)}", f"{letters}{rng.randint(0, 999)}",
                       f"({letters.lower()})", f"[{rng.randint(1, 99)}]",
                       f"{rng.randint(1, 99)}:{rng.randint(0, 59):02d}",
                       f"{rng.randint(1, 10 ** rng.randint(1, 3) - 1)}{letters}",
                       f"{letters[:2]}{rng.randint(1, 99)} {rng.randint(1, 9)}{rng.choice(string.ascii_uppercase)}"
                       f"{rng.choice(string.ascii_uppercase)}"))


def _word(rng):
    word = rng.choice(_WORDS) if rng.random() < 0.7 else _pseudo_word(rng)
    case = rng.random()
    if case < 0.2:
        return word.capitalize()
    if case < 0.27:
        return word.upper()
    if case < 0.3:
        return "".join(c.upper() if rng.random() < 0.5 else c for c in word)
    return word


def random_text(rng, max_chars=MAX_CHARS):
    """One printed line: words, numbers, dates, amounts, codes and punctuation, at most `max_chars` long."""
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        token = (_word(rng) if r < 0.6 else _number(rng) if r < 0.72 else _date(rng) if r < 0.8
                 else _amount(rng) if r < 0.88 else _code(rng))
        if rng.random() < 0.15:
            token += rng.choice(_PUNCT)
        if rng.random() < 0.03:
            token = rng.choice(("\"", "'", "(")) + token + rng.choice(("\"", "'", ")"))
        parts.append(token)
    text = " ".join(parts)
    if rng.random() < 0.3:
        text = text[:1].upper() + text[1:] + rng.choice(".!?:")
    text = text[:max_chars].strip()
    return text or _word(rng)


def corpus(seed, count):
    rng = random.Random(seed)
    return [random_text(rng) for _ in range(count)]


@functools.lru_cache(maxsize=256)
def _font(font_file, size):
    return ImageFont.truetype(font_file, size)  # not parsed again for every line


def _scan(img, rng, paper):
    """A grey render as a scan: slight rotation, then blur, noise and JPEG each on half the images (drawn from
    `rng` in this order)."""
    angle = rng.uniform(-1.2, 1.2)
    if abs(angle) > 0.2:
        img = img.rotate(angle, resample=Image.BICUBIC, expand=False, fillcolor=paper)
    if rng.random() < 0.5:
        img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.2, 0.9)))
    if rng.random() < 0.5:
        noise = np.random.default_rng(rng.getrandbits(32)).normal(0.0, rng.uniform(3, 12), (img.height, img.width))
        img = Image.fromarray(np.clip(np.asarray(img, np.float32) + noise, 0, 255).astype(np.uint8))
    if rng.random() < 0.5:
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=rng.randint(30, 90))
        img = Image.open(io.BytesIO(buf.getvalue())).convert("L")
    return img


def render_line(text, font_file, rng, augment=True, centres=False, margin=0.0):
    """RGB image of `text` on one line, its height in LINE_HEIGHT, with scan augmentations (scale, slight
    rotation, blur, noise, contrast, JPEG) when `augment`. With `centres`, returns (image, x) where x[i] is the
    horizontal centre of character i in image pixels (the training's attention guide; draws nothing from `rng`).
    `margin` is the probability of a blank right margin of up to MARGIN_PX (paper, under the same noise, blur and
    JPEG), as a crop of a scanned line has; 0 draws nothing for it from `rng`, so older sets keep their pixels."""
    height = rng.randint(*LINE_HEIGHT) if augment else 34
    size = int(height * (rng.uniform(0.58, 0.72) if augment else 0.66))
    font = _font(font_file, size)
    left, top, right, bottom = font.getbbox(text)
    ascent, descent = font.getmetrics()
    pad_x = rng.randint(2, 10) if augment else 6
    width = right - left + 2 * pad_x
    if augment and margin and rng.random() < margin:
        width += rng.randint(1, MARGIN_PX)
    paper = rng.randint(200, 255) if augment else 255
    ink = rng.randint(0, 70) if augment else 0
    img = Image.new("L", (width, height), paper)
    y = (height - (ascent + descent)) // 2 + (rng.randint(-2, 2) if augment else 0)
    ImageDraw.Draw(img).text((pad_x - left, y), text, font=font, fill=ink)
    if centres:  # each prefix's advance once (measured twice each, they took ~28 % of the rendering time)
        ends = [font.getlength(text[:i]) for i in range(len(text) + 1)]
        xs = [pad_x - left + (ends[i] + ends[i + 1]) / 2 for i in range(len(text))]
    else:
        xs = None
    if augment:
        img = _scan(img, rng, paper)
    return (img.convert("RGB"), xs) if centres else img.convert("RGB")


def sample(rng, fonts=TRAIN_FONTS, augment=True, max_chars=MAX_CHARS, centres=False, margin=0.0):
    """(image, text) for one random line in one of `fonts`; (image, text, character centres) with `centres`;
    `margin` as for render_line."""
    text = random_text(rng, max_chars)
    if centres:
        img, xs = render_line(text, font_path(rng.choice(fonts)), rng, augment, centres=True, margin=margin)
        return img, text, xs
    return render_line(text, font_path(rng.choice(fonts)), rng, augment, margin=margin), text


def pad_width(img, multiple):
    """Extend a line image on the right with its paper colour to a width that is a multiple of `multiple` (a
    margin, as on a scan), so a set of lines needs only a few image shapes (and graph compilations)."""
    width = -(-img.width // multiple) * multiple
    if width == img.width:
        return img
    paper = tuple(int(v) for v in np.median(np.asarray(img)[:, -2:].reshape(-1, 3), axis=0))
    out = Image.new("RGB", (width, img.height), paper)
    out.paste(img, (0, 0))
    return out


def held_out(seed, count, fonts=TRAIN_FONTS, augment=True, pad_to=None):
    """A fixed evaluation set: [(image, text)] from `seed` (use seeds the training never draws); `pad_to` pads
    widths to a multiple (pad_width)."""
    rng = random.Random(seed)
    items = [sample(rng, fonts, augment) for _ in range(count)]
    return [(pad_width(img, pad_to), text) for img, text in items] if pad_to else items


# ---- crops as users bring them (--data crops): any height, paper on every side, screenshots, short blocks -------

CROP_HEIGHT = (20, 200)  # a single line's crop: a small screenshot line up to a heading scanned with paper around
SCREEN_SIZE = (11, 16)  # screenshot text sizes in px: no blur, noise or JPEG, sharp anti-aliasing
BLOCK_LINES = (2, 4)  # a block: 2-4 lines, answer lines joined by "\n" in reading order
BLOCK_CHARS = 32
BLOCK_SIZE = (11, 40)  # a block's font size in px (log-uniform)
CROP_KINDS = (("line", 0.55), ("screen", 0.15), ("block", 0.30))
# A crop is rendered at most this many pixels (its font and margins scaled down together): the demo processor
# downscales anything above its max_pixels (training/demo/model.py MAX_PIXELS) anyway, and a 200-px line of 40
# characters would be a 200 x 3,700 canvas to blur, noise and compress. Twice the processor's limit, so the
# processor's own downscaling is still part of training.
CROP_MAX_AREA = 2 * 28 * 28 * 48


def _log_uniform(rng, lo, hi):
    import math
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _screen_colours(rng):
    """(paper, ink) RGB of a screenshot: white or a light tint behind dark, possibly coloured text."""
    paper = (255, 255, 255) if rng.random() < 0.5 else tuple(rng.randint(225, 255) for _ in range(3))
    while True:
        ink = (0, 0, 0) if rng.random() < 0.3 else tuple(rng.randint(0, 140) for _ in range(3))
        if sum(paper) - sum(ink) >= 3 * 150:  # readable contrast
            return paper, ink


def _layout(font, lines, pitch):
    """(line height, step from line to line, widths) of `lines` in `font`, `pitch` x the line height apart."""
    line_h = sum(font.getmetrics())
    return line_h, max(line_h, round(line_h * pitch)), [font.getlength(line) for line in lines]


def render_crop(lines, font_file, rng, size, margins, pitch=1.0, centred=False, screen=False):
    """An RGB crop of `lines` (one or more) in font `font_file` at `size` px, lines `pitch` x the font's line height
    apart, left-aligned or `centred`, with blank paper `margins` (left, top, right, bottom) px around the text.
    Scan style (grey paper and ink, rotation, blur, noise, JPEG) unless `screen` (flat colours, sharp, no
    augmentation). Returns (image, centres): centres[i] is the (x, y) centre of character i of "\n".join(lines) in
    image pixels, None for the newlines (the training's attention guide)."""
    font = _font(font_file, size)
    line_h, step, widths = _layout(font, lines, pitch)
    text_w = max(widths)
    left, top, right, bottom = margins
    width = int(round(text_w)) + left + right
    height = step * (len(lines) - 1) + line_h + top + bottom
    if screen:
        paper, ink = _screen_colours(rng)
        img = Image.new("RGB", (width, height), paper)
    else:
        paper, ink = rng.randint(200, 255), rng.randint(0, 70)
        img = Image.new("L", (width, height), paper)
    draw = ImageDraw.Draw(img)
    centres = []
    for k, (line, w) in enumerate(zip(lines, widths)):
        x0 = left + ((text_w - w) / 2 if centred else 0.0)
        y0 = top + k * step
        draw.text((x0, y0), line, font=font, fill=ink)
        ends = [font.getlength(line[:i]) for i in range(len(line) + 1)]
        if k:
            centres.append(None)  # the newline between two lines
        centres.extend((x0 + (ends[i] + ends[i + 1]) / 2, y0 + line_h / 2) for i in range(len(line)))
    if not screen:
        img = _scan(img, rng, paper).convert("RGB")
    return img, centres


def _fit_area(size, margins, lines, font_file, pitch, max_area=CROP_MAX_AREA):
    """Scale a crop's font size and margins down together until the crop is at most `max_area` pixels."""
    for _ in range(8):
        line_h, step, widths = _layout(_font(font_file, size), lines, pitch)
        w = max(widths) + margins[0] + margins[2]
        h = step * (len(lines) - 1) + line_h + margins[1] + margins[3]
        if w * h <= max_area or size <= 8:
            break
        f = (max_area / (w * h)) ** 0.5 * 0.98
        size = max(8, int(size * f))
        margins = tuple(max(1, int(m * f)) for m in margins)
    return size, margins


def sample_crop(rng, fonts=TRAIN_FONTS, max_chars=MAX_CHARS, kind=None, max_area=CROP_MAX_AREA):
    """(image, text, centres) of one crop as users bring them, `kind` "line" / "screen" / "block" or drawn from
    CROP_KINDS: a scanned line of any height in CROP_HEIGHT with paper on every side (the text anywhere in the
    crop), a screenshot line of SCREEN_SIZE text, or a block of BLOCK_LINES lines (text: lines joined by "\n").
    Crops above `max_area` pixels are drawn smaller (training: the processor downscales them anyway); None: at the
    size a user's crop has (evaluation)."""
    if kind is None:
        r, kind = rng.random(), CROP_KINDS[-1][0]
        for name, share in CROP_KINDS:
            if r < share:
                kind = name
                break
            r -= share
    font_file = font_path(rng.choice(fonts))
    if kind == "block":
        lines = [random_text(rng, min(max_chars, BLOCK_CHARS)) for _ in range(rng.randint(*BLOCK_LINES))]
        size = int(_log_uniform(rng, *BLOCK_SIZE))
        screen = rng.random() < 0.3
        pitch, centred = rng.uniform(1.0, 1.5), rng.random() < 0.15
        margins = tuple(rng.randint(1, max(2, size * k)) for k in (3, 2, 3, 2))
    elif kind == "screen":
        lines = [random_text(rng, max_chars)]
        size, screen, pitch, centred = rng.randint(*SCREEN_SIZE), True, 1.0, False
        margins = (rng.randint(2, 24), rng.randint(2, 12), rng.randint(2, 24) + (rng.randint(1, MARGIN_PX)
                                                                                if rng.random() < 0.3 else 0),
                   rng.randint(2, 12))
    elif kind == "line":
        lines = [random_text(rng, max_chars)]
        height = _log_uniform(rng, *CROP_HEIGHT)
        size = max(9, int(height * rng.uniform(0.4, 0.92) / 1.17))  # DejaVu's line height is ~1.17 x its size
        font = _font(font_file, size)
        line_h = sum(font.getmetrics())
        spare = max(0, int(height) - line_h)
        top = rng.randint(0, spare)
        side = 4 + int(height) // 3
        margins = (rng.randint(1, side), top, rng.randint(1, side) + (rng.randint(1, MARGIN_PX)
                                                                      if rng.random() < 0.3 else 0), spare - top)
        screen, pitch, centred = False, 1.0, False
    else:
        raise ValueError(kind)
    if max_area is not None:
        size, margins = _fit_area(size, margins, lines, font_file, pitch, max_area)
    img, centres = render_crop(lines, font_file, rng, size, margins, pitch, centred, screen)
    return img, "\n".join(lines), centres


def sample_crop_lines(rng, fonts=TRAIN_FONTS, max_chars=MAX_CHARS, height=34):
    """The lines of one crop (sample_crop) as ms_ocr's line reader sees them (ms_ocr/processing/text_lines.py:
    found, scaled to `height` px): [(image, text, x centres of its characters)], or [] when the lines found are not
    the lines drawn (the reader would misread that crop whatever it learns)."""
    from ms_ocr.processing.text_lines import line_crops
    img, text, centres = sample_crop(rng, fonts, max_chars)
    crops, lines = line_crops(img, height), text.split("\n")
    if len(crops) != len(lines):
        return []
    per_line, current = [], []
    for c in centres + [None]:  # None: the newline between two lines (and the end)
        if c is None:
            per_line.append(current)
            current = []
        else:
            current.append(c)
    return [(line, t, [(x - x0) * scale for x, _ in cs])
            for (line, (x0, _), scale), t, cs in zip(crops, lines, per_line)]


EXAMPLES = (("invoice.png", "Invoice #2041 due 15 Mar 2026: $1,284.50", "DejaVuSerif.ttf"),
            ("address.png", "221B Baker Street, London NW1 6XE", "DejaVuSans.ttf"),
            ("receipt.png", "Total (incl. 19% tax): EUR 86.37", "DejaVuSansMono.ttf"),
            ("note.png", "Meeting moved to Friday 14:30\nRoom 4B, second floor\nPlease bring the March report",
             "DejaVuSans.ttf"))


def make_examples(out_dir):
    """Write the example images (clean renders, fixed seed) and return their paths: the single lines as the
    renderer draws them, a text of several lines as a screenshot of a note (24-px text, paper around it)."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for i, (name, text, font) in enumerate(EXAMPLES):
        path = os.path.join(out_dir, name)
        if "\n" in text:
            img, _ = render_crop(text.split("\n"), font_path(font), random.Random(i), 24, (28, 22, 40, 26),
                                 pitch=1.35, screen=True)
        else:
            img = render_line(text, font_path(font), random.Random(i), augment=False)
        img.save(path, optimize=True)
        paths.append(path)
    return paths


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", metavar="DIR", required=True, help="write the example images here")
    for p in make_examples(parser.parse_args().examples):
        print(p)
