"""The reference's PP-DocLayout post-processing, run from the installed transformers source (its pixels:
bench/layout.py reference_pixels).

transformers' image_processing_pp_doclayout_v2/v3/v4 modules import torchvision at the top, and PyPI's torchvision
does not import beside the local torch 2.13 CPU build; the methods the tests need are pure torch / NumPy / OpenCV /
SciPy, so they are compiled from that file's own source here (decorators dropped)."""

import ast
import os
from collections import defaultdict

# the methods of each version's image processor that post_process_object_detection reaches
METHODS = {
    "2": ("_get_order_seqs", "post_process_object_detection"),
    "3": ("_get_order_seqs", "extract_custom_vertices", "_mask2polygon", "_extract_polygon_points_by_masks",
          "post_process_object_detection"),
    "4": ("post_process_object_detection", "_quad_to_corners", "_to_sparse_graph", "_find_cycle", "_remove_cycles",
          "_find_connected_components", "_topological_sort", "_decode_reading_order"),
}


def reference_postprocessor(version="v2", size=800):
    """An object with the reference class's post-processing methods (METHODS); `size`: its processor's square size
    (V3 maps masks to the page through it)."""
    import cv2
    import numpy as np
    import torch
    import transformers
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    n = version[-1]
    path = os.path.join(os.path.dirname(transformers.__file__), "models", f"pp_doclayout_v{n}",
                        f"image_processing_pp_doclayout_v{n}.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    cls = next(c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == f"PPDocLayoutV{n}ImageProcessor")
    methods = [m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name in METHODS[n]]
    assert sorted(m.name for m in methods) == sorted(METHODS[n]), "reference methods renamed"
    for m in methods:
        m.decorator_list = []  # @requires(backends=...): availability checks only
    module = ast.Module(body=[ast.ClassDef(name="Reference", bases=[], keywords=[], body=methods, decorator_list=[],
                                           type_params=[])], type_ignores=[])
    namespace = {"torch": torch, "np": np, "cv2": cv2, "TensorType": object, "defaultdict": defaultdict,
                 "coo_matrix": coo_matrix, "connected_components": connected_components}
    exec(compile(ast.fix_missing_locations(module), path, "exec"), namespace)  # noqa: S102 - the reference's code
    ref = namespace["Reference"]()
    ref.size = {"height": size, "width": size}
    return ref


def assert_same_detections(blocks, want, width, height, min_count):
    """LayoutBlocks against the reference post-processing's result for a width x height page: the same (order,
    label) pairs (two labels of one query may swap places), in reading order, scores within 1e-4, boxes and points
    within 1 px of the reference's clipped to the page."""
    import numpy as np
    assert len(blocks) == len(want["scores"]) >= min_count
    pairs = sorted(zip(want["order_seq"].tolist(), want["labels"].tolist()))
    assert sorted((b.order, b.label_id) for b in blocks) == pairs
    assert [b.order for b in blocks] == sorted(b.order for b in blocks)
    by = {(b.order, b.label_id): b for b in blocks}
    for score, label, box, order, points in zip(want["scores"], want["labels"], want["boxes"], want["order_seq"],
                                                want["polygon_points"]):
        b = by[(int(order), int(label))]
        assert abs(b.score - float(score)) < 1e-4
        np.testing.assert_allclose(b.box, np.clip(box.numpy(), 0, [width, height, width, height]), atol=1.0)
        points = np.asarray(points, np.float64)
        assert np.asarray(b.points).shape == points.shape and len(points) >= 4
        np.testing.assert_allclose(b.points, np.clip(points, 0, [width, height]), atol=1.0)


def gap_threshold(logits, lo, hi, min_gap=1e-4):
    """(threshold, k): a score threshold in the widest gap between the k-th and (k+1)-th highest sigmoid scores of
    raw logits (torch), lo <= k <= hi, so k detections pass and no score lies within rounding of it (the gap at least
    `min_gap`)."""
    import numpy as np
    import torch
    s = torch.sigmoid(logits.double()).flatten().sort(descending=True).values.numpy()
    k = lo + int(np.argmax(s[lo - 1:hi] - s[lo:hi + 1]))
    assert s[k - 1] - s[k] >= min_gap, f"no gap of {min_gap} among scores {lo}..{hi + 1}"
    return float((s[k - 1] + s[k]) / 2), k
