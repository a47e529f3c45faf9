"""Layout boxes -> the blocks the document pipeline reads, as PaddleOCR 3.x's PaddleOCR-VL pipeline configures
PP-DocLayoutV2 (PaddleX PaddleOCR-VL.yaml, DetPostProcess, filter_overlap_boxes): per-label score thresholds,
class-aware NMS, the near-full-page image filter, containment removal for the "large"-merge labels, then the
pipeline's own overlap filter. Reading order is the layout model's; filters only drop blocks."""

# PaddleOCR-VL.yaml: 0.4 for formulas, titles and text, 0.45 for seals, 0.5 for the rest
THRESHOLDS = {"display_formula": 0.4, "doc_title": 0.4, "inline_formula": 0.4, "paragraph_title": 0.4, "text": 0.4,
              "vertical_text": 0.4, "seal": 0.45}
DEFAULT_THRESHOLD = 0.5
NMS_SAME_LABEL, NMS_OTHER_LABEL = 0.6, 0.98
# labels whose boxes swallow any box at least 90 % inside them ("large" merge mode)
CONTAINER_LABELS = ("chart", "display_formula", "doc_title", "inline_formula", "paragraph_title")
CONTAINED_FRACTION = 0.9
OVERLAP_DROP = 0.7  # pipeline filter: of two boxes overlapping more than this share of the smaller, drop the smaller
DROPPED_LABELS = ("reference",)  # a whole references section: its reference_content entries are kept instead


def _area(box):
    return max(box[2] - box[0], 0.0) * max(box[3] - box[1], 0.0)


def _inter(a, b):
    return max(min(a[2], b[2]) - max(a[0], b[0]), 0.0) * max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)


def _iou_plus_one(a, b):
    """IoU with the +1-pixel box convention of the reference NMS."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]) + 1)
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]) + 1)
    inter = iw * ih
    area_a = (a[2] - a[0] + 1) * (a[3] - a[1] + 1)
    area_b = (b[2] - b[0] + 1) * (b[3] - b[1] + 1)
    return inter / float(area_a + area_b - inter)


def thresholds(labels, overrides=None):
    """{label: threshold} for every label: the pipeline's defaults, then `overrides`."""
    table = {name: THRESHOLDS.get(name, DEFAULT_THRESHOLD) for name in labels}
    table.update(overrides or {})
    return table


def nms(blocks):
    """Greedy by descending score: a box is dropped at IoU >= 0.6 with a kept box of its label, >= 0.98 with
    another label. Input order is kept."""
    order = sorted(range(len(blocks)), key=lambda i: -blocks[i].score)
    kept = []
    for i in order:
        if all(_iou_plus_one(blocks[i].box, blocks[k].box) <
               (NMS_SAME_LABEL if blocks[i].label == blocks[k].label else NMS_OTHER_LABEL) for k in kept):
            kept.append(i)
    return [blocks[i] for i in sorted(kept)]


def drop_page_images(blocks, width, height):
    """An `image` block covering nearly the whole page (> 82 % of a landscape page's area, > 93 % otherwise) is a
    scan's background, not a figure; kept when it is the only block or dropping would leave nothing."""
    if len(blocks) < 2:
        return blocks
    limit = (0.82 if width > height else 0.93) * width * height
    kept = [b for b in blocks if b.label != "image" or _area(b.box) <= limit]
    return kept or blocks


def drop_contained(blocks, containers=CONTAINER_LABELS):
    """Remove every block lying at least 90 % inside a block of a container label (e.g. a text box inside a
    title, an inline formula inside a display formula)."""
    out = []
    for i, b in enumerate(blocks):
        area = _area(b.box)
        inside = area > 0 and any(j != i and c.label in containers and _inter(b.box, c.box) / area >= CONTAINED_FRACTION
                                  for j, c in enumerate(blocks))
        if not inside:
            out.append(b)
    return out


def drop_overlaps(blocks):
    """The pipeline's filter: `reference` blocks go; of two blocks overlapping more than 70 % of the smaller one the
    smaller goes (the first on a tie), except an image against another label (a figure keeps its caption box)."""
    blocks = [b for b in blocks if b.label not in DROPPED_LABELS]
    dropped = set()
    for i in range(len(blocks)):
        for j in range(i + 1, len(blocks)):
            if i in dropped or j in dropped:
                continue
            a, b = blocks[i], blocks[j]
            small = min(_area(a.box), _area(b.box))
            if small <= 0 or _inter(a.box, b.box) / small <= OVERLAP_DROP:
                continue
            if "image" in (a.label, b.label) and a.label != b.label:
                continue
            dropped.add(j if _area(a.box) >= _area(b.box) else i)
    return [b for k, b in enumerate(blocks) if k not in dropped]


def filter_blocks(blocks, width, height):
    """Detector blocks (already thresholded, in reading order) -> the blocks the pipeline recognises."""
    blocks = [b for b in blocks if b.box[2] > b.box[0] and b.box[3] > b.box[1]]
    blocks = nms(blocks)
    blocks = drop_page_images(blocks, width, height)
    blocks = drop_contained(blocks)
    return drop_overlaps(blocks)
