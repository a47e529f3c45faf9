"""Layout analysis of one page with a PP-DocLayoutV2/V3/V4 checkpoint: preprocess -> the model (one compiled graph,
or eager) -> the reference post-processing -> labelled blocks in page pixels, sorted by reading order."""

import contextlib
import time
from dataclasses import dataclass

import numpy as np

from ms_ocr.layout.stages import StagedModel


@dataclass
class LayoutBlock:
    label: str
    label_id: int
    score: float
    box: tuple  # (x1, y1, x2, y2) in page pixels, clipped to the page
    order: int  # the reading-order rank of the block's query
    points: tuple = None  # V3: the mask's polygon, V4: the quadrilateral ((x, y), ...) in page pixels, clipped

    def as_dict(self):
        out = {"label": self.label, "label_id": self.label_id, "score": round(self.score, 5),
               "box": [round(v, 2) for v in self.box], "order": self.order}
        if self.points is not None:
            out["points"] = [[round(x, 2), round(y, 2)] for x, y in self.points]
        return out


WARP_FIELDS = ("roll", "quadrant_confidence", "shear", "kx", "ky")  # PP-DocLayoutV4's warp_params, in order


@dataclass
class PageLayout:
    blocks: list  # LayoutBlock, in reading order
    warp: dict  # V4 with a geometry head: WARP_FIELDS -> value; else None
    outputs: tuple  # the model's outputs for the page (numpy), named by LayoutDetector.output_names


# Below this many pages the command line's --layout-mode auto takes eager on the CPU: no compile, ~1 GB, ~2-2.2 s a
# page, against the staged graphs' ~9-12 s of compiling, ~1.1-1.3 GB and ~1.3 s a page (V3/V4 at their real configs,
# Intel Xeon, 2 cores, README.md "Speed"): eager finishes first up to about 13 pages.
EAGER_BELOW_PAGES = 12


def layout_mode_for(mode, target, pages):
    """"graph" or "eager" for `mode` ("graph", "eager" or "auto"): auto takes eager on the CPU for a run of fewer
    than EAGER_BELOW_PAGES pages (`pages` None: unknown, graph), else graph."""
    if mode != "auto":
        return mode
    return "eager" if target == "CPU" and pages is not None and pages < EAGER_BELOW_PAGES else "graph"


class LayoutDetector:
    """A loaded PP-DocLayoutV2, V3 or V4 checkpoint (config.json's model_type decides). `threshold`: one score for
    every label, a {label: score} dict (other labels keep the default), or None for the reference post-processing's
    0.5.

    `mode`: "graph" runs compiled graphs stage by stage (layout/stages.py: the front, one decoder layer's graph for
    every layer, the heads); "whole" compiles the model as one graph (more to compile, a larger activation pool);
    "eager" runs it op by op in PyNative (no compile, slow on the CPU). Measurements: README.md, "Speed"."""

    MODES = ("graph", "whole", "eager")

    def __init__(self, model_dir, threshold=None, mode="graph"):
        import mindspore as ms
        from ms_ocr.layout.loading import load_model
        from ms_ocr.layout.processor import LayoutPreprocessConfig
        if mode not in self.MODES:
            raise ValueError(f"unknown layout mode {mode!r} (graph, whole or eager)")
        self.mode = mode
        t0 = time.perf_counter()
        self.spec, self.cfg, self.net = load_model(model_dir)
        self.net.set_train(False)
        self.pcfg = LayoutPreprocessConfig.from_dir(model_dir, self.spec.pixel_path)
        self.labels = [self.cfg.id2label[i] for i in range(self.cfg.num_labels)]
        self.threshold = self._thresholds(threshold)
        self._host = self.net.host_inputs(self.pcfg.height, self.pcfg.width)
        self._ms = ms
        self._run = StagedModel(self.net, self._host) if mode == "graph" else \
            (lambda pixels: self.net(pixels, *self._host))
        self.load_seconds = time.perf_counter() - t0
        self.compile_seconds = self._pending_compile = 0.0
        self._compiled = False

    @property
    def output_names(self):
        """Names of raw()'s outputs, in order (the reference's output fields)."""
        return self.spec.outputs

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
        """The model's outputs (numpy) for [1, 3, H, W] pixels, named by output_names."""
        from ms_ocr.device import eager
        t0 = time.perf_counter()
        with eager() if self.mode == "eager" else contextlib.nullcontext():
            out = tuple(o.asnumpy() for o in self._run(self._ms.Tensor(pixel_values)))
        if self.mode != "eager" and not self._compiled:  # the first call compiles the graphs: kept apart from timings
            self.compile_seconds = self._pending_compile = time.perf_counter() - t0
            self._compiled = True
        return out

    def analyze(self, image, threshold=None):
        """PIL page -> PageLayout: the blocks in reading order, V4's page geometry, the raw outputs. `threshold`
        (one score or one per label id) replaces the detector's own for this call."""
        from ms_ocr.layout.processor import preprocess
        w, h = image.size
        outputs = self.raw(preprocess(image, self.pcfg))
        res = self.spec.detections(outputs, [(h, w)], self.threshold if threshold is None else threshold,
                                   self.pcfg)[0]
        polygons = res.get("polygon_points")
        blocks = []
        for i, (score, label, box, order) in enumerate(zip(res["scores"], res["labels"], res["boxes"],
                                                            res["order_seq"])):
            x1, y1, x2, y2 = (float(v) for v in box)
            box = (min(max(x1, 0.0), w), min(max(y1, 0.0), h), min(max(x2, 0.0), w), min(max(y2, 0.0), h))
            points = None if polygons is None else tuple(
                (min(max(float(x), 0.0), w), min(max(float(y), 0.0), h)) for x, y in polygons[i])
            blocks.append(LayoutBlock(self.labels[int(label)], int(label), float(score), box, int(order), points))
        warp = res.get("warp_params")
        return PageLayout(blocks, None if warp is None else dict(zip(WARP_FIELDS, (float(v) for v in warp))),
                          outputs)

    def release(self):
        """Free the compiled graphs and their activation memory ("graph" mode; e.g. once a document's layout is
        done and the recogniser needs the room). The next page compiles them again."""
        if isinstance(self._run, StagedModel):
            self._run.release()
        self._compiled = False

    def detect(self, image, threshold=None):
        """PIL page -> list[LayoutBlock] in reading order (analyze(...).blocks)."""
        return self.analyze(image, threshold).blocks
