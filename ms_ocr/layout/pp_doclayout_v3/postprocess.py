"""PP-DocLayoutV3's post-processing (transformers' PPDocLayoutV3ImageProcessor.post_process_object_detection) in
NumPy and OpenCV: V2's selection and vote-decoded order (layout/postprocess.py), then each detection's mask,
binarised at its threshold, cropped to its box, resized to the box in page pixels and traced: the largest external
contour, simplified (approxPolyDP, epsilon 0.004 of its perimeter), corners kept where the turn is convex (a 45-degree
corner moved out along its bisector). A box without mask pixels, or a polygon of fewer than 4 points, is its
rectangle."""

import numpy as np

from ms_ocr.layout.postprocess import label_thresholds, postprocess, sigmoid

EPSILON_RATIO = 0.004
SHARP_ANGLE = 45.0


def _convex_vertices(points):
    """Keep the vertices where the outline turns one way (cross product < 0 in image coordinates); one whose angle
    is within a degree of 45 is pushed out along its bisector by the mean length of its two edges."""
    pts = np.asarray(points)
    n = len(pts)
    out = []
    for i in range(n):
        cur = pts[i]
        a, b = pts[(i - 1) % n] - cur, pts[(i + 1) % n] - cur
        if a[1] * b[0] - a[0] * b[1] >= 0:
            continue
        la, lb = np.linalg.norm(a), np.linalg.norm(b)
        angle = np.degrees(np.arccos(np.clip((a @ b) / (la * lb), -1.0, 1.0)))
        if abs(angle - SHARP_ANGLE) < 1:
            direction = a / la + b / lb
            out.append(tuple(cur + direction / np.linalg.norm(direction) * ((la + lb) / 2)))
        else:
            out.append(tuple(cur))
    return out


def mask_polygon(mask):
    """A binary uint8 mask -> its simplified outline as a list of (x, y), or None without a contour."""
    import cv2
    contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    if not contours:
        return None
    largest = max(contours, key=cv2.contourArea)
    approx = cv2.approxPolyDP(largest, EPSILON_RATIO * cv2.arcLength(largest, True), True)
    return _convex_vertices(np.atleast_2d(approx.squeeze()))


def box_polygons(boxes, masks, scale):
    """Detections' boxes [N, 4] (page pixels) and binary masks [N, h, w] (model resolution: the input size / 4)
    -> one polygon [n, 2] per box in page pixels. `scale`: (input width / page width, input height / page
    height)."""
    import cv2
    sx, sy = scale[0] / 4, scale[1] / 4
    mh, mw = masks.shape[1:]
    out = []
    for box, mask in zip(boxes, masks):
        x0, y0, x1, y1 = (int(v) for v in np.asarray(box).astype(np.int32))
        rect = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float32)
        if x1 - x0 <= 0 or y1 - y0 <= 0:
            out.append(rect)
            continue
        xs = np.clip([int(round(x0 * sx)), int(round(x1 * sx))], 0, mw)
        ys = np.clip([int(round(y0 * sy)), int(round(y1 * sy))], 0, mh)
        crop = mask[ys[0]:ys[1], xs[0]:xs[1]]
        if crop.size == 0 or not crop.any():
            out.append(rect)
            continue
        polygon = mask_polygon(cv2.resize(crop.astype(np.uint8), (x1 - x0, y1 - y0), interpolation=cv2.INTER_NEAREST))
        # no contour (the reference gives None) or fewer than 4 points: the box's rectangle
        out.append(rect if polygon is None or len(polygon) < 4 else np.asarray(polygon) + np.array([x0, y0]))
    return out


def detections(outputs, target_sizes, threshold, pcfg):
    """The model's outputs -> per image dict(scores, labels, boxes, order_seq, queries, polygon_points), in reading
    order. A detection's mask is binarised at its own threshold (the reference's one threshold, or its label's)."""
    logits, boxes, order_logits, masks = outputs
    results = postprocess(logits, boxes, order_logits, target_sizes, threshold)
    for i, res in enumerate(results):
        h, w = target_sizes[i]
        cut = label_thresholds(threshold, res["labels"], logits.shape[-1])
        binary = (sigmoid(masks[i][res["queries"]]) > cut[:, None, None]).astype(np.int32)
        res["polygon_points"] = box_polygons(res["boxes"], binary, (pcfg.width / w, pcfg.height / h))
    return results
