"""The document pipeline: layout analysis (PP-DocLayoutV2) -> filtered blocks in reading order -> regions cut from
the original page -> each region kind recognised as one batch by a VLM -> Markdown + JSON + a drawing.

Region batching: the regions of one kind (text, tables, formulas, charts) go through the VLM together on the
continuous-batching engine (ms_ocr/engine.py): vision encoder over the packed crops, one right-padded prefill, one
decode step for every running region; up to `max_batch_size` at a time."""

import os
import time
from dataclasses import dataclass, field

from ms_ocr.pipeline import layout_filter, regions
from ms_ocr.pipeline.markdown import IGNORED_LABELS, Block, number_blocks, page_markdown

REGION_KINDS = ("text", "table", "formula", "chart")


@dataclass
class PageResult:
    width: int
    height: int
    blocks: list  # Block, in reading order
    layout: list = field(default_factory=list)  # the detector's blocks before filtering (LayoutBlock)
    pictures: dict = field(default_factory=dict)  # relative path -> PIL crop of blocks kept as pictures
    timings: dict = field(default_factory=dict)
    ignore: tuple = IGNORED_LABELS

    def markdown(self):
        return page_markdown(self.blocks, self.width, self.ignore)

    def as_dict(self):
        return {"width": self.width, "height": self.height, "blocks": [b.as_dict() for b in self.blocks],
                "layout": [b.as_dict() for b in self.layout], "timings": self.timings}

    def draw(self, page):
        """The page with every block's box outlined and its reading number (or label) written on it."""
        from ms_ocr.processing.boxes import draw_boxes
        items = [{"box": b.box, "text": f"{b.order} {b.label}" if b.order else b.label} for b in self.blocks]
        return draw_boxes(page, items)

    def save_pictures(self, folder):
        for rel, img in self.pictures.items():
            path = os.path.join(folder, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            img.convert("RGB").save(path, quality=95)


class DocumentPipeline:
    """`layout`: a LayoutDetector (None: blocks must be passed to parse); `recognizer`: a loaded VLMPipeline with
    its ModelSpec (ms_ocr.models.get: region_tasks, tasks); `sampling`: SamplingConfig for every region."""

    def __init__(self, layout, recognizer, spec, sampling, charts=False, max_batch_size=8,
                 ignore=IGNORED_LABELS, picture_dir="imgs", ignore_eos=False):
        self.layout, self.vlm, self.spec, self.sampling = layout, recognizer, spec, sampling
        self.charts, self.max_batch_size, self.ignore, self.picture_dir = charts, max_batch_size, tuple(ignore), picture_dir
        self.ignore_eos = ignore_eos  # benchmarks: every region generates its full token budget
        # the pipeline's per-label layout thresholds (the detector's own default is the reference's single 0.5)
        self.layout_threshold = None
        if layout is not None:
            self.layout_threshold = layout.threshold_array(layout_filter.thresholds(layout.labels))

    @classmethod
    def load(cls, recognizer="paddleocr-vl", model_path=None, layout_path=None, device="auto", dtype="auto",
             threads=None, max_new_tokens=4096, sampling=None, layout_mode="graph", pages=None, quantize="none",
             kv_cache_dtype="auto", **options):
        """Load the layout model and the recogniser (weights located as the command line does). `sampling`: a
        SamplingConfig or a function (spec, vlm) -> SamplingConfig; default greedy with the recogniser's
        n-gram blocking. `layout_mode`: LayoutDetector's ("graph" or "eager"), or "auto" (eager on the CPU
        when `pages`, the number of pages the run will parse, is below EAGER_BELOW_PAGES). `options`: the
        constructor's. `quantize`, `kv_cache_dtype`: the recogniser's (models/quantize.py, device.resolve_kv_dtype)."""
        from ms_ocr import models
        from ms_ocr.device import setup
        from ms_ocr.generate import model_sampling
        from ms_ocr.models.pp_doclayout_v2 import LayoutDetector
        from ms_ocr.models.pp_doclayout_v2.runner import layout_mode_for
        from ms_ocr.weights import locate, locate_layout
        layout_dir = locate_layout(layout_path)
        model_dir = locate(recognizer, model_path)
        target = setup(device, threads)
        spec = models.get(recognizer)
        layout = LayoutDetector(layout_dir, mode=layout_mode_for(layout_mode, target, pages))
        vlm = spec.load(model_dir, target, dtype, quantize=quantize, kv_cache_dtype=kv_cache_dtype)
        if sampling is None:
            sampling = model_sampling(spec, vlm.processor.tokenizer, max_new_tokens)
        elif callable(sampling):
            sampling = sampling(spec, vlm)
        return cls(layout, vlm, spec, sampling, **options)

    def detect(self, page):
        """The detector's blocks for a page (thresholds of the pipeline), before the pipeline's filters."""
        if self.layout is None:
            raise ValueError("no layout model loaded: pass the page's blocks")
        return self.layout.detect(page, self.layout_threshold)

    def parse(self, page, layout_blocks=None):
        """PIL page -> PageResult. `layout_blocks` (LayoutBlock list in reading order) replaces the detector's
        output, e.g. boxes from another source or fixed boxes for a benchmark."""
        w, h = page.size
        timings = {}
        t0 = time.perf_counter()
        detected = list(layout_blocks) if layout_blocks is not None else self.detect(page)
        t1 = time.perf_counter()
        if layout_blocks is None:
            timings["layout_ms"] = 1000 * (t1 - t0 - self.layout.pop_compile_seconds())
        kept = layout_filter.filter_blocks(detected, w, h)
        blocks = number_blocks([Block(i, b.label, b.box, b.score) for i, b in enumerate(kept)])
        t2 = time.perf_counter()
        timings["filter_ms"] = 1000 * (t2 - t1)
        work, pictures = {}, {}
        for b in blocks:
            b.task = regions.region_task(b.label, self.charts)
            region = regions.crop(page, b.box)
            if region is None:
                b.error = "empty box"
                continue
            if b.task is None:
                x1, y1, x2, y2 = regions.pixel_box(b.box)
                b.image = f"{self.picture_dir}/img_in_{b.label}_box_{x1}_{y1}_{x2}_{y2}.jpg"
                pictures[b.image] = region
            else:
                if b.task == "formula":
                    region = regions.trim_to_ink(region)
                work.setdefault(b.task, []).append((b, region))
        timings["crops_ms"] = 1000 * (time.perf_counter() - t2)
        timings["regions"] = {kind: len(items) for kind, items in work.items()}
        for kind in REGION_KINDS:
            if kind in work:
                timings[f"recognize_{kind}_ms"], timings[f"{kind}_tokens"] = self._recognize(kind, work[kind])
        timings["compile_s"] = round(sum(self.vlm.runtime.compiler.seconds.values()), 3)
        return PageResult(w, h, blocks, detected, pictures, timings, self.ignore)

    def _recognize(self, kind, items):
        """Recognise one kind's regions as a batch; fills each block's content (or error). Returns (wall ms without
        compile time, generated tokens)."""
        from ms_ocr import line_reader
        from ms_ocr.engine import BatchEngine
        task = self.spec.region_tasks[kind]
        prompt = self.spec.tasks[task]
        requests, by_key, lengths = [], {}, []
        for b, region in items:
            key = str(b.index)
            by_key[key] = b
            try:
                prep, lines = self.vlm.prepare_request([region], prompt)  # a line reader: the region's lines
            except Exception as e:  # noqa: BLE001 - e.g. a sliver box the processor refuses: that block only
                b.error = f"preprocess: {e}"
                continue
            requests.append(line_reader.request(key, [region], prompt, prep=prep, lines=lines, task=task))
            lengths += [p.input_ids.shape[0] for p in line_reader.prepared(prep, lines)]
        if not requests:
            return 0.0, 0
        longest = max(lengths)
        tokens = [0]

        def done(req, result, error):
            b = by_key[req.key]
            if error is not None:
                b.error = str(error)
                return
            b.content = regions.clean(result["text"], b.label, kind)
            tokens[0] += len(result["token_ids"])

        # the token budget, cut to what the recogniser's context leaves after the longest region's prompt (a
        # recogniser of 4,096 positions failed every page with the default budget of 4,096)
        room = self.vlm.runtime.max_positions - int(longest)
        if room < 1:
            for r in requests:
                by_key[r.key].error = f"the region's prompt of {longest} tokens fills the recogniser's context"
            return 0.0, 0
        t0 = time.perf_counter()
        engine = BatchEngine(self.vlm, self.sampling, min(self.max_batch_size, len(requests)), longest,
                             min(self.sampling.max_new_tokens, room), ignore_eos=self.ignore_eos)
        line_reader.run(engine, requests, done)
        wall = time.perf_counter() - t0 - sum(engine.compile_seconds().values())
        return 1000 * wall, tokens[0]
