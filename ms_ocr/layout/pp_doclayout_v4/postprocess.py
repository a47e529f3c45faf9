"""PP-DocLayoutV4's post-processing (transformers' PPDocLayoutV4ImageProcessor.post_process_object_detection) in
NumPy: the quads' corners in page pixels, V2's selection of query x label pairs (layout/postprocess.py), the reading
order decoded over the kept queries (order.py; a query kept under two labels has one rank), boxes as the corners'
extent; the page geometry passes through."""

import numpy as np

from ms_ocr.layout.postprocess import top_pairs
from ms_ocr.layout.pp_doclayout_v4.order import decode_order


def quad_corners(quads):
    """[..., 10] (cx, cy, four corner offsets + 0.5) -> [..., 4, 2] corners TL, TR, BR, BL in [0, 1]."""
    quads = np.asarray(quads, np.float32)
    return quads[..., None, :2] + (quads[..., 2:].reshape(quads.shape[:-1] + (4, 2)) - np.float32(0.5))


def detections(outputs, target_sizes, threshold, pcfg=None):
    """The model's outputs -> per image dict(scores, labels, boxes, polygon_points [n, 4, 2], order_seq, queries
    [, warp_params]) in reading order (a stable sort of the ranks)."""
    logits, quads, relative, successor = outputs[:4]
    warp = outputs[4] if len(outputs) > 4 else None
    if len(target_sizes) != len(logits):
        raise ValueError("postprocess: one target size per image is needed")
    results = []
    for i, (h, w) in enumerate(target_sizes):
        corners = quad_corners(quads[i]) * np.array([w, h], np.float32)
        score, label, query = top_pairs(np.asarray(logits[i], np.float32), threshold)
        unique, inverse = np.unique(query, return_inverse=True)
        sub = np.ix_(unique, unique)
        ranks = decode_order(np.asarray(relative[i], np.float32)[sub], np.asarray(successor[i], np.float32)[sub])
        order = ranks[inverse.reshape(-1)]
        sort = np.argsort(order, kind="stable")
        pts = corners[query][sort]
        res = {"scores": score[sort], "labels": label[sort], "polygon_points": pts, "order_seq": order[sort],
               "boxes": np.concatenate([pts.min(-2), pts.max(-2)], -1) if len(pts) else np.zeros((0, 4), np.float32),
               "queries": query[sort]}
        if warp is not None:
            res["warp_params"] = np.asarray(warp[i], np.float32)
        results.append(res)
    return results
