"""Drawing parsed text boxes on the page (HunyuanOCR spotting, DeepSeek-OCR grounding, layout blocks)."""

import os

from PIL import Image, ImageDraw, ImageFont

# Fonts that cover CJK when installed; PIL's built-in font (Latin only) otherwise.
_FONT_CANDIDATES = ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
                    "/usr/share/fonts/truetype/noto/NotoSansCJK-Regular.ttc",
                    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
                    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
_PALETTE = [(230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180), (70, 240, 240),
            (240, 50, 230), (128, 128, 0), (0, 128, 128), (170, 110, 40)]


def _font(size):
    for path in _FONT_CANDIDATES:
        if os.path.isfile(path):
            try:
                return ImageFont.truetype(path, size)
            except OSError:
                continue
    try:
        return ImageFont.load_default(size)
    except TypeError:  # Pillow < 10.1
        return ImageFont.load_default()


def draw_boxes(image, items, numbered=False):
    """RGB copy of `image` with each item's box ([x1, y1, x2, y2] in pixels) outlined, lightly filled and
    labelled with its text (or its 1-based number when `numbered`); an item with "points" (a polygon in pixels) is
    drawn as that polygon, labelled at its box's corner."""
    base = image.convert("RGB")
    overlay = Image.new("RGBA", base.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    font = _font(max(12, min(base.size) // 60))
    for i, item in enumerate(items):
        x1, y1, x2, y2 = item["box"]
        x1, x2 = sorted((x1, x2))
        y1, y2 = sorted((y1, y2))
        color = _PALETTE[i % len(_PALETTE)]
        if item.get("points") is not None:
            draw.polygon([(float(x), float(y)) for x, y in item["points"]], outline=color + (255,),
                         fill=color + (28,), width=2)
        else:
            draw.rectangle([x1, y1, x2, y2], outline=color + (255,), fill=color + (28,), width=2)
        label = str(i + 1) if numbered else str(item.get("text", ""))
        if label:
            draw.text((x1, max(0, y1 - font.size - 2) if hasattr(font, "size") else max(0, y1 - 12)), label,
                      fill=color + (255,), font=font)
    return Image.alpha_composite(base.convert("RGBA"), overlay).convert("RGB")
