"""Layout blocks -> the blocks the document pipeline reads, by PaddleX 3.7.2's rules for PaddleOCR-VL: the layout
post-processing it runs on the detector's output (LayoutAnalysisProcess: strict per-label thresholds, class-aware
NMS, the near-full-page image filter, containment removal for the "large" merge labels, reading order, the outline
of each block, clipping) and then the pipeline's own overlap filter (paddleocr_vl/uilts.filter_overlap_boxes).
Filters only drop blocks; the order is the layout model's.

A block is anything with `label`, `score`, `box` (x1, y1, x2, y2 page pixels), `order` and `points` (the outline
((x, y), ...) in page pixels, or None), as ms_ocr.layout's LayoutBlock; the output blocks are copies with integer
boxes and the outline the version keeps."""

import dataclasses

import numpy as np

from ms_ocr.pipeline import geometry as G
from ms_ocr.pipeline.versions import CONTAINER_LABELS, VERSIONS

NMS_SAME_LABEL, NMS_OTHER_LABEL = 0.6, 0.98
PAGE_IMAGE_LANDSCAPE, PAGE_IMAGE_PORTRAIT = 0.82, 0.93  # share of the page an `image` block may cover
CONTAINED_FRACTION = 0.9
MIN_SIDE = 6  # overlap filter: a block narrower or lower than this is dropped
INLINE_OVERLAP, OVERLAP_DROP, POLYGON_KEEP = 0.5, 0.7, 0.7
DROPPED_LABELS = ("reference",)  # a whole references section: its reference_content entries are kept instead
VISUAL_LABELS = frozenset(("image", "table", "seal", "chart"))
# auto outline: the rectangle when its minimum-area quad covers it this well, the quad when it fits the polygon
RECT_FIT, QUAD_FIT, NEIGHBOUR_OVERLAP = 0.95, 0.8, 0.01


def _outline(b):
    return G.rect_points(b.box) if b.points is None else np.asarray(b.points, np.float64).reshape(-1, 2)


def _as_points(arr):
    return tuple((float(x), float(y)) for x, y in np.asarray(arr).reshape(-1, 2))


def nms(blocks, quad=False):
    """Greedy by descending score (equal scores: the later block first, as PaddleX's reversed argsort gives them):
    a block goes at IoU >= 0.6 with a kept block of its label, >= 0.98 with another label. IoU of the boxes with
    the +1-pixel convention, or (`quad`) of the outlines. Input order is kept."""
    order = sorted(range(len(blocks)), key=lambda i: (-blocks[i].score, -i))
    kept = []
    for i in order:
        a = blocks[i]
        for k in kept:
            b = blocks[k]
            if quad:
                iou = G.polygon_overlap(_outline(a), _outline(b)) if G.box_intersection(a.box, b.box) > 0 else 0.0
            else:
                iou = G.box_iou_plus_one(a.box, b.box)
            if iou >= (NMS_SAME_LABEL if a.label == b.label else NMS_OTHER_LABEL):
                break
        else:
            kept.append(i)
    return [blocks[i] for i in sorted(kept)]


def drop_page_images(blocks, width, height):
    """An `image` block covering nearly the whole page (> 82 % of a landscape page's area, > 93 % otherwise) is a
    scan's background, not a figure; kept when it is the only block or dropping would leave nothing."""
    if len(blocks) < 2:
        return blocks
    limit = (PAGE_IMAGE_LANDSCAPE if width > height else PAGE_IMAGE_PORTRAIT) * width * height

    def area_on_page(box):
        return (min(width, box[2]) - max(0, box[0])) * (min(height, box[3]) - max(0, box[1]))
    kept = [b for b in blocks if b.label != "image" or area_on_page(b.box) <= limit]
    return kept or blocks


def drop_contained(blocks, containers=CONTAINER_LABELS):
    """Remove every block lying at least 90 % inside a block of a container label (e.g. a text box inside a
    title, an inline formula inside a display formula)."""
    out = []
    for i, b in enumerate(blocks):
        area = (b.box[2] - b.box[0]) * (b.box[3] - b.box[1])
        inside = area > 0 and any(j != i and c.label in containers and
                                  G.box_intersection(b.box, c.box) / area >= CONTAINED_FRACTION
                                  for j, c in enumerate(blocks))
        if not inside:
            out.append(b)
    return out


def auto_outline(box, points, previous):
    """PaddleX's "auto" layout shape: the box's rectangle when the polygon is missing or has < 4 points, or when the
    polygon's minimum-area quad covers the rectangle (IoU >= 0.95); the quad when it fits the polygon (IoU >= 0.8)
    and the previous block's outline hardly touches this box (< 1 % of the smaller); else the polygon."""
    rect = G.rect_points(box)
    if points is None or len(points) < 4:
        return rect
    poly = np.asarray(points, np.float64).reshape(-1, 2)
    quad = G.min_area_quad(poly)
    if G.polygon_overlap(rect, quad) >= RECT_FIT:
        return rect
    touching = G.polygon_overlap(previous, rect, "small") if previous is not None else 0.0
    if G.polygon_overlap(poly, quad) >= QUAD_FIT and touching < NEIGHBOUR_OVERLAP:
        return quad
    return poly


def postprocess(blocks, width, height, version, thresholds):
    """PaddleX's layout post-processing on the detector's blocks: boxes rounded, kept when score > the label's
    threshold (`thresholds`: {label: score}; other labels the version's default), NMS, page-sized images, contained
    blocks, sorted by reading order, each block's outline as the version keeps it, boxes clipped to the page as
    integers (empty ones dropped)."""
    blocks = [dataclasses.replace(b, box=tuple(float(v) for v in np.round(np.asarray(b.box, np.float64))))
              for b in blocks]
    blocks = [b for b in blocks if b.score > thresholds.get(b.label, version.default_threshold)]
    blocks = nms(blocks, quad=version.nms == "quad")
    blocks = drop_page_images(blocks, width, height)
    blocks = drop_contained(blocks, version.container_labels)
    blocks = sorted(blocks, key=lambda b: b.order)
    out, previous = [], None
    for b in blocks:
        points = None
        if version.shape == "auto":
            outline = auto_outline(b.box, b.points, previous)
            previous, points = outline, _as_points(outline)
        elif version.shape == "as_detected":
            points = _as_points(_outline(b))
        x1, y1 = int(max(0, b.box[0])), int(max(0, b.box[1]))
        x2, y2 = int(min(width, b.box[2])), int(min(height, b.box[3]))
        if x2 > x1 and y2 > y1:
            out.append(dataclasses.replace(b, box=(x1, y1, x2, y2), points=points))
    return out


def drop_overlaps(blocks, shape="rect"):
    """The pipeline's filter: `reference` blocks go, so do blocks under 6 px a side; an inline formula overlapping
    another block by more than half of the smaller goes; of two blocks overlapping more than 70 % of the smaller,
    the smaller goes (the later one on a tie) unless their outlines overlap less than 70 % (when the shape is not
    "rect") or one is an image, table, seal or chart and the other another label (but a table loses against any
    label other than image, seal and chart)."""
    blocks = [b for b in blocks if b.label not in DROPPED_LABELS]
    area = [abs((b.box[2] - b.box[0]) * (b.box[3] - b.box[1])) for b in blocks]
    dropped = set()
    for i, a in enumerate(blocks):
        if a.box[2] - a.box[0] < MIN_SIDE or a.box[3] - a.box[1] < MIN_SIDE:
            dropped.add(i)
        for j in range(i + 1, len(blocks)):
            if i in dropped or j in dropped:
                continue
            b = blocks[j]
            overlap = G.box_overlap_small(a.box, b.box)
            if "inline_formula" in (a.label, b.label) and overlap > INLINE_OVERLAP:
                dropped.update(k for k, x in ((i, a), (j, b)) if x.label == "inline_formula")
                continue
            if overlap <= OVERLAP_DROP:
                continue
            if shape != "rect" and a.points is not None and \
                    G.polygon_overlap(_outline(a), _outline(b), "small") < POLYGON_KEEP:
                continue
            labels = {a.label, b.label}
            if labels & VISUAL_LABELS and len(labels) > 1 and ("table" not in labels or labels <= VISUAL_LABELS):
                continue
            dropped.add(j if area[i] >= area[j] else i)
    return [b for k, b in enumerate(blocks) if k not in dropped]


def filter_blocks(blocks, width, height, version=VERSIONS["1.0"], thresholds=None):
    """Detector blocks -> the blocks the pipeline recognises (postprocess, then drop_overlaps); `thresholds`
    defaults to the version's."""
    if thresholds is None:
        thresholds = version.threshold_table(sorted({b.label for b in blocks}))
    return drop_overlaps(postprocess(blocks, width, height, version, thresholds), version.shape)
