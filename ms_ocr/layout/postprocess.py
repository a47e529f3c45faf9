"""Post-processing the PP-DocLayout image processors share (transformers' post_process_object_detection), in NumPy:
sigmoid scores, one top-k of num_queries over queries x labels (a query may come out with two labels), a threshold
(one score, or one per label for the pipeline), boxes in pixels; V2 and V3 rank queries by the vote decoding of their
order logits (`order_from_logits`), V4 by its own graph decoding (pp_doclayout_v4/order.py)."""

import numpy as np


def sigmoid(x):
    with np.errstate(over="ignore"):  # very negative logits: exp overflows to inf and the score is exactly 0
        return (1.0 / (1.0 + np.exp(-np.asarray(x, np.float32)))).astype(np.float32)


def order_from_logits(order_logits):
    """The reference's vote decoding: s = sigmoid(logits); votes[j] = sum_{i<j} s[i, j] + sum_{k>j} (1 - s[j, k]);
    the rank of each slot in ascending votes. order_logits [B, L, L] (numpy) -> ranks [B, L] int."""
    s = sigmoid(order_logits)  # masked pairs hold -1e4: s is exactly 0
    votes = np.triu(s, 1).sum(1) + np.tril(1.0 - np.swapaxes(s, 1, 2), -1).sum(1)
    pointers = np.argsort(votes, axis=1, kind="stable")
    ranks = np.empty_like(pointers)
    np.put_along_axis(ranks, pointers, np.arange(pointers.shape[1])[None].repeat(len(pointers), 0), axis=1)
    return ranks


def top_pairs(logits, threshold):
    """One image's logits [Q, C] -> (scores, labels, queries) of the query x label pairs in the top-Q scores that
    reach the threshold (one value, or one per label id), in descending score order."""
    q, c = logits.shape
    scores = sigmoid(logits).reshape(-1)
    top = np.argsort(-scores, kind="stable")[:q]
    score, label, query = scores[top], top % c, top // c
    cut = np.broadcast_to(np.asarray(threshold, np.float32), (c,))[label] if np.ndim(threshold) else \
        np.float32(threshold)
    keep = score >= cut
    return score[keep], label[keep], query[keep]


def label_thresholds(threshold, labels, count):
    """The threshold of each detection: `threshold` is one value or one per label id."""
    return np.broadcast_to(np.asarray(threshold, np.float32), (count,))[labels] if np.ndim(threshold) else \
        np.full(len(labels), np.float32(threshold))


def boxes_to_pixels(boxes, target_sizes, b):
    """(cx, cy, w, h) boxes [B, Q, 4] in [0, 1] -> (x1, y1, x2, y2), in pixels of target_sizes' (h, w) if given."""
    boxes = np.asarray(boxes, np.float32)
    xyxy = np.concatenate([boxes[..., :2] - 0.5 * boxes[..., 2:], boxes[..., :2] + 0.5 * boxes[..., 2:]], -1)
    if target_sizes is None:
        return xyxy
    if len(target_sizes) != b:
        raise ValueError("postprocess: one target size per image is needed")
    hw = np.asarray(target_sizes, np.float32)
    return xyxy * np.stack([hw[:, 1], hw[:, 0], hw[:, 1], hw[:, 0]], 1)[:, None, :]


def postprocess(logits, boxes, order_logits, target_sizes=None, threshold=0.5):
    """PP-DocLayoutV2/V3's outputs -> per image dict(scores, labels, boxes (x1, y1, x2, y2, in pixels of
    target_sizes' (h, w), else in [0, 1]), order_seq, queries), sorted by reading order (stably: the reference's
    sort is not, see README.md). The reading order of a pair is its query's rank."""
    logits = np.asarray(logits, np.float32)
    b = logits.shape[0]
    ranks = order_from_logits(np.asarray(order_logits))
    xyxy = boxes_to_pixels(boxes, target_sizes, b)
    results = []
    for i in range(b):
        score, label, query = top_pairs(logits[i], threshold)
        order = ranks[i, query]
        sort = np.argsort(order, kind="stable")
        results.append({"scores": score[sort], "labels": label[sort], "boxes": xyxy[i, query][sort],
                        "order_seq": order[sort], "queries": query[sort]})
    return results
