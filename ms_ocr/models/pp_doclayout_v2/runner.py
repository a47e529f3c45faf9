"""Layout analysis of one page: preprocess -> PP-DocLayoutV2 (one compiled graph, or eager) -> labelled boxes in
page pixels, sorted by reading order."""

import contextlib
import time
from dataclasses import dataclass

import numpy as np


@dataclass
class LayoutBlock:
    label: str
    label_id: int
    score: float
    box: tuple  # (x1, y1, x2, y2) in page pixels, clipped to the page
    order: int  # the reading-order network's rank of the block's query

    def as_dict(self):
        return {"label": self.label, "label_id": self.label_id, "score": round(self.score, 5),
                "box": [round(v, 2) for v in self.box], "order": self.order}


# Below this many pages a CPU run finishes sooner with the layout model eager: 9.6-11.8 s per page and no
# compile, against 3.3-3.5 s per page after a 34-59 s compile (real config, 800x800, this 2-core CPU), and
# 1.4 GB instead of ~7.4 GB at the layout (whole document pipeline on one page: peak RSS 7.4 vs 12.9 GB).
EAGER_BELOW_PAGES = 5


def layout_mode_for(mode, target, pages):
    """"graph" or "eager" for `mode` ("graph", "eager" or "auto"): auto takes eager on the CPU for a run of fewer
    than EAGER_BELOW_PAGES pages (`pages` None: unknown, graph), else graph."""
    if mode != "auto":
        return mode
    return "eager" if target == "CPU" and pages is not None and pages < EAGER_BELOW_PAGES else "graph"


class LayoutDetector:
    """A loaded PP-DocLayoutV2 checkpoint. `threshold`: one score for every label, a {label: score} dict (other
    labels keep the default), or None for the reference post-processing's 0.5.

    `mode`: "graph" compiles the model as one graph (measured on the CPU at the real config, 800x800 input:
    3.3 s per page after a ~34 s compile, 7.4 GB peak RSS: the CPU graph keeps a static pool for all its
    activations); "eager" runs it op by op in PyNative (9.6 s per page, no compile, 1.4 GB peak): fewer than
    ~5 pages, or when memory is short, eager finishes first."""

    MODES = ("graph", "eager")

    def __init__(self, model_dir, threshold=None, mode="graph"):
        import mindspore as ms
        from ms_ocr.models.pp_doclayout_v2 import load_model
        from ms_ocr.models.pp_doclayout_v2.processor import LayoutPreprocessConfig
        if mode not in self.MODES:
            raise ValueError(f"unknown layout mode {mode!r} (graph or eager)")
        self.mode = mode
        t0 = time.perf_counter()
        self.cfg, self.net = load_model(model_dir)
        self.net.set_train(False)
        self.pcfg = LayoutPreprocessConfig.from_dir(model_dir)
        self.labels = [self.cfg.id2label[i] for i in range(self.cfg.num_labels)]
        self.threshold = self._thresholds(threshold)
        self._host = self.net.model.host_inputs(self.pcfg.height, self.pcfg.width)
        self._ms = ms
        self.load_seconds = time.perf_counter() - t0
        self.compile_seconds = self._pending_compile = 0.0
        self._compiled = False

    def _thresholds(self, threshold):
        if threshold is None:
            return 0.5
        if isinstance(threshold, dict):
            unknown = sorted(set(threshold) - set(self.labels))
            if unknown:
                raise ValueError(f"layout threshold for unknown label(s) {', '.join(unknown)}; labels: "
                                 f"{', '.join(self.labels)}")
            return np.asarray([float(threshold.get(name, 0.5)) for name in self.labels], np.float32)
        return float(threshold)

    def threshold_array(self, table):
        """{label: threshold} (every label) -> the per-label array postprocess takes."""
        return np.asarray([float(table[name]) for name in self.labels], np.float32)

    def pop_compile_seconds(self):
        """Compile time of the last call (0 after the first), so stage timings can leave it out."""
        seconds, self._pending_compile = self._pending_compile, 0.0
        return seconds

    def raw(self, pixel_values):
        """The graph's outputs for [1, 3, H, W] pixels: logits, boxes (cx, cy, w, h), order logits, kept mask."""
        from ms_ocr.device import eager
        t0 = time.perf_counter()
        with eager() if self.mode == "eager" else contextlib.nullcontext():
            out = tuple(o.asnumpy() for o in self.net(self._ms.Tensor(pixel_values), *self._host))
        if self.mode == "graph" and not self._compiled:  # the first call compiles the graph: kept apart from the timings
            self.compile_seconds = self._pending_compile = time.perf_counter() - t0
            self._compiled = True
        return out

    def detect(self, image, threshold=None):
        """PIL page -> list[LayoutBlock] in reading order; `threshold` (one score or one per label id) replaces
        the detector's own for this call."""
        from ms_ocr.models.pp_doclayout_v2.processor import postprocess, preprocess
        w, h = image.size
        logits, boxes, order_logits, _ = self.raw(preprocess(image, self.pcfg))
        res = postprocess(logits, boxes, order_logits, [(h, w)], self.threshold if threshold is None else threshold)[0]
        blocks = []
        for score, label, box, order in zip(res["scores"], res["labels"], res["boxes"], res["order_seq"]):
            x1, y1, x2, y2 = (float(v) for v in box)
            box = (min(max(x1, 0.0), w), min(max(y1, 0.0), h), min(max(x2, 0.0), w), min(max(y2, 0.0), h))
            blocks.append(LayoutBlock(self.labels[int(label)], int(label), float(score), box, int(order)))
        return blocks
