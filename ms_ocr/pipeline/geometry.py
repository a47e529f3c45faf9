"""Box and polygon measures the PaddleOCR-VL pipeline's layout rules are written in (PaddleX 3.7.2: the +1-pixel IoU
of its NMS, overlap over the smaller box, shapely polygon overlaps, the minimum-area quadrilateral of a polygon).

Polygon areas are exact for simple polygons: a polygon's indicator is the signed sum of the triangles (first vertex,
p_i, p_i+1), so the area two polygons share is the signed sum of the areas their triangles share, each pair clipped
as two convex shapes. PaddleX asks shapely (repairing self-crossing outlines with buffer(0)); for simple polygons the
numbers are the same, a self-crossing one counts its loops by winding number here."""

import numpy as np


def box_area(box):
    """Area of (x1, y1, x2, y2), 0 for an inverted box."""
    return max(box[2] - box[0], 0.0) * max(box[3] - box[1], 0.0)


def box_intersection(a, b):
    return max(min(a[2], b[2]) - max(a[0], b[0]), 0.0) * max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)


def box_iou_plus_one(a, b):
    """IoU with the +1-pixel box convention of PaddleX's detection NMS (a box x1..x2 spans x2 - x1 + 1 pixels)."""
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0]) + 1) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]) + 1)
    area_a = (a[2] - a[0] + 1) * (a[3] - a[1] + 1)
    area_b = (b[2] - b[0] + 1) * (b[3] - b[1] + 1)
    return inter / float(area_a + area_b - inter)


def box_overlap_small(a, b):
    """Intersection over the smaller box's area (0 when that area is 0)."""
    small = min(abs((a[2] - a[0]) * (a[3] - a[1])), abs((b[2] - b[0]) * (b[3] - b[1])))
    return box_intersection(a, b) / small if small > 0 else 0.0


def polygon_area(points):
    """Unsigned area of a closed polygon [(x, y), ...] (shoelace)."""
    p = np.asarray(points, np.float64).reshape(-1, 2)
    if len(p) < 3:
        return 0.0
    x, y = p[:, 0], p[:, 1]
    return abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 2


def _signed_area(p):
    return (float(np.dot(p[:, 0], np.roll(p[:, 1], -1)) - np.dot(p[:, 1], np.roll(p[:, 0], -1)))) / 2


def _clip_convex(subject, clip):
    """Sutherland-Hodgman: the part of convex polygon `subject` inside convex counter-clockwise `clip`."""
    out = [tuple(v) for v in subject]
    n = len(clip)
    for i in range(n):
        if not out:
            break
        ax, ay = clip[i]
        bx, by = clip[(i + 1) % n]
        inp, out = out, []

        def side(q):
            return (bx - ax) * (q[1] - ay) - (by - ay) * (q[0] - ax)

        for j, cur in enumerate(inp):
            prev = inp[j - 1]
            sc, sp = side(cur), side(prev)
            if sc >= 0:
                if sp < 0:
                    t = sp / (sp - sc)
                    out.append((prev[0] + t * (cur[0] - prev[0]), prev[1] + t * (cur[1] - prev[1])))
                out.append(cur)
            elif sp >= 0:
                t = sp / (sp - sc)
                out.append((prev[0] + t * (cur[0] - prev[0]), prev[1] + t * (cur[1] - prev[1])))
    return out


def _fan(points):
    """[(sign, ccw triangle)] whose signed sum is the polygon's indicator."""
    p = np.asarray(points, np.float64).reshape(-1, 2)
    tris = []
    for i in range(1, len(p) - 1):
        tri = np.stack([p[0], p[i], p[i + 1]])
        s = _signed_area(tri)
        if s != 0:
            tris.append((1.0 if s > 0 else -1.0, tri if s > 0 else tri[::-1]))
    return tris


def polygon_intersection_area(a, b):
    """Area shared by two simple polygons."""
    ta, tb = _fan(a), _fan(b)
    total = 0.0
    for sa, pa in ta:
        lo_a, hi_a = pa.min(0), pa.max(0)
        for sb, pb in tb:
            if (pb.max(0) < lo_a).any() or (pb.min(0) > hi_a).any():
                continue
            piece = _clip_convex(pa, pb)
            if len(piece) >= 3:
                total += sa * sb * polygon_area(piece)
    return abs(total)


def polygon_overlap(a, b, mode="union"):
    """Shared area over the union ("union"), the smaller ("small") or the larger ("large") polygon's area."""
    inter = polygon_intersection_area(a, b)
    area_a, area_b = polygon_area(a), polygon_area(b)
    ref = {"union": area_a + area_b - inter, "small": min(area_a, area_b), "large": max(area_a, area_b)}[mode]
    return inter / ref if ref > 0 else 0.0


def min_area_quad(points):
    """The minimum-area rectangle around a polygon as 4 corners: ordered by angle about their centre, starting at the
    corner with the smallest x + y (PaddleX convert_polygon_to_quad); None below 3 points."""
    import cv2
    p = np.asarray(points, np.float32).reshape(-1, 2)
    if len(p) < 3:
        return None
    quad = cv2.boxPoints(cv2.minAreaRect(p))
    centre = quad.mean(0)
    quad = quad[np.argsort(np.arctan2(quad[:, 1] - centre[1], quad[:, 0] - centre[0]))]
    return np.roll(quad, -int(np.argmin(quad[:, 0] + quad[:, 1])), axis=0)


def rect_points(box):
    """The 4 corners of an integer-truncated box, clockwise from the top left."""
    x1, y1, x2, y2 = (int(v) for v in box)
    return np.array([[x1, y1], [x2, y1], [x2, y2], [x1, y2]], np.float32)
