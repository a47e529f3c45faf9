"""The document pipeline (PaddleX 3.7.2's PaddleOCR-VL pipeline, versions 1.0 / 1.5 / 1.6, and 1.8 as far as it is
public): layout analysis -> the version's layout post-processing and overlap filter -> regions cut from the page
(white outside a block's outline) -> neighbouring text blocks merged -> each region kind recognised as one batch by
a VLM -> Markdown + JSON + a drawing. The versions' differences are one row each in versions.py.

Region batching: the regions of one kind (text, tables, formulas, charts) go through the VLM together on the
continuous-batching engine (ms_ocr/engine.py): vision encoder over the packed crops, one right-padded prefill, one
decode step for every running region; up to `max_batch_size` at a time."""

import copy
import dataclasses
import time

import numpy as np

from ms_ocr.pipeline import layout_filter, merge, regions
from ms_ocr.pipeline import versions as V
from ms_ocr.pipeline.markdown import IGNORED_LABELS, Block, number_blocks
from ms_ocr.pipeline.result import PageResult

REGION_KINDS = ("text", "table", "formula", "chart")
PADDLEX_RECOGNIZER = "paddleocr-vl"  # the recogniser PaddleX's pipeline asks for its per-task pixel bounds

__all__ = ["REGION_KINDS", "DocumentPipeline", "PageResult"]


class DocumentPipeline:
    """`layout`: a LayoutDetector (None: blocks must be passed to parse); `recognizer`: a loaded VLMPipeline with
    its ModelSpec (ms_ocr.models.get: region_tasks, tasks); `sampling`: SamplingConfig for every region.
    `version`: a versions.VERSIONS name or PipelineVersion (default: the one the layout checkpoint runs, else 1.0);
    `layout_threshold`: one score for every label instead of the version's; `region_pixels`: (min, max) pixels of
    every region image for a PaddleOCR-VL recogniser ("version": the version's, as PaddleX asks; None: the
    recogniser checkpoint's own bounds)."""

    def __init__(self, layout, recognizer, spec, sampling, charts=False, max_batch_size=8,
                 ignore=IGNORED_LABELS, picture_dir="imgs", ignore_eos=False, version=None, layout_threshold=None,
                 region_pixels="version"):
        self.layout, self.vlm, self.spec, self.sampling = layout, recognizer, spec, sampling
        self.charts, self.max_batch_size, self.ignore = charts, max_batch_size, tuple(ignore)
        self.picture_dir = picture_dir
        self.ignore_eos = ignore_eos  # benchmarks: every region generates its full token budget
        if version is None or isinstance(version, str):
            version = V.select(version, layout.spec.model_type) if layout is not None else V.VERSIONS[
                version or V.DEFAULT]
        self.version = version
        if region_pixels == "version":
            region_pixels = version.region_pixels
        self.region_pixels = region_pixels
        self.thresholds = None  # {label: score} of the version (or the override), applied again strictly
        self.layout_threshold = None  # what the detector gets: one score, or one per label id
        self.set_threshold(layout_threshold)

    def set_threshold(self, override=None):
        """Thresholds of the version, or `override` (one score) for every label (PaddleX's layout_threshold)."""
        if self.layout is None:
            self.thresholds = {}
            self.layout_threshold = override
            return
        self.thresholds = self.version.threshold_table(self.layout.labels, override)
        values = set(self.thresholds.values())
        self.layout_threshold = values.pop() if len(values) == 1 else self.layout.threshold_array(self.thresholds)

    @classmethod
    def load(cls, recognizer="paddleocr-vl", model_path=None, layout_path=None, device="auto", dtype="auto",
             threads=None, max_new_tokens=4096, sampling=None, layout_mode="graph", pages=None, quantize="none",
             kv_cache_dtype="auto", version=None, **options):
        """Load the layout model and the recogniser (weights located as the command line does). `sampling`: a
        SamplingConfig or a function (spec, vlm) -> SamplingConfig; default greedy with the recogniser's
        n-gram blocking. `layout_mode`: LayoutDetector's ("graph" or "eager"), or "auto" (eager on the CPU
        when `pages`, the number of pages the run will parse, is below EAGER_BELOW_PAGES). `version`: forced pipeline
        version (its layout checkpoint is the default one; a layout checkpoint of another model is an error).
        `options`: the constructor's. `quantize`, `kv_cache_dtype`: the recogniser's."""
        from ms_ocr import models
        from ms_ocr.device import setup
        from ms_ocr.generate import model_sampling
        from ms_ocr.layout import LayoutDetector
        from ms_ocr.layout.runner import layout_mode_for
        from ms_ocr.weights import locate
        layout_dir, chosen = locate_layout(layout_path, version)
        model_dir = locate(recognizer, model_path)
        target = setup(device, threads)
        spec = models.get(recognizer).for_checkpoint(model_dir)  # the version's region prompts and decoding
        layout = LayoutDetector(layout_dir, mode=layout_mode_for(layout_mode, target, pages))
        vlm = spec.load(model_dir, target, dtype, quantize=quantize, kv_cache_dtype=kv_cache_dtype)
        if sampling is None:
            sampling = model_sampling(spec, vlm.processor.tokenizer, max_new_tokens)
        elif callable(sampling):
            sampling = sampling(spec, vlm)
        return cls(layout, vlm, spec, sampling, version=chosen, **options)

    def analyze(self, page):
        """The layout model's PageLayout for a page (the pipeline's thresholds), before the pipeline's rules."""
        if self.layout is None:
            raise ValueError("no layout model loaded: pass the page's blocks")
        return self.layout.analyze(page, self.layout_threshold)

    def detect(self, page):
        return self.analyze(page).blocks

    def parse(self, page, layout_blocks=None, warp=None):
        """PIL page -> PageResult. `layout_blocks` (LayoutBlock list: label, score, box, order, points) replaces the
        detector's output, e.g. boxes from another source or fixed boxes for a benchmark; `warp` goes with them."""
        w, h = page.size
        timings = {}
        t0 = time.perf_counter()
        if layout_blocks is None:
            found = self.analyze(page)
            detected, warp = found.blocks, found.warp
            timings["layout_ms"] = 1000 * (time.perf_counter() - t0 - self.layout.pop_compile_seconds())
        else:
            detected = list(layout_blocks)
        t1 = time.perf_counter()
        thresholds = self.thresholds or self.version.threshold_table(sorted({b.label for b in detected}),
                                                                     self.layout_threshold)
        kept = layout_filter.filter_blocks(detected, w, h, self.version, thresholds)
        t2 = time.perf_counter()
        timings["filter_ms"] = 1000 * (t2 - t1)
        blocks, images, pictures = self._regions(np.asarray(page.convert("RGB")), kept)
        timings["crops_ms"] = 1000 * (time.perf_counter() - t2)
        work = {}
        for b, image in zip(blocks, images):
            if b.task is not None and image is not None:
                work.setdefault(b.task, []).append((b, regions.trim_to_ink(image) if b.task == "formula" else image))
        timings["regions"] = {kind: len(items) for kind, items in work.items()}
        for kind in REGION_KINDS:
            if kind in work:
                timings[f"recognize_{kind}_ms"], timings[f"{kind}_tokens"] = self._recognize(kind, work[kind])
        timings["compile_s"] = round(sum(self.vlm.runtime.compiler.seconds.values()), 3)
        return PageResult(w, h, blocks, detected, pictures, timings, self.ignore, self.version.name, warp, self.charts)

    def _regions(self, pixels, kept):
        """(blocks in their final order, the image each sends to the recogniser or None, {picture path: crop}): crops
        white outside the outlines, text neighbours merged, picture labels kept as files."""
        crops = [regions.crop(pixels, b.box, b.points) for b in kept]
        order, images, group_of = list(range(len(kept))), crops, list(range(len(kept)))
        if self.version.merge_blocks:
            fixed = regions.image_labels(self.charts) + ("table",)
            order, images, group_of = merge.merge(kept, crops, fixed)
        position = {k: n for n, k in enumerate(order)}
        blocks, out_images, pictures = [], [], {}
        for n, k in enumerate(order):
            d = kept[k]
            b = Block(n, d.label, d.box, d.score, points=d.points, group=position[group_of[k]],
                      task=regions.region_task(d.label, self.charts))
            if crops[k] is None:
                b.error = "empty box"
            elif b.task is None:
                x1, y1, x2, y2 = regions.pixel_box(d.box)
                b.image = f"{self.picture_dir}/img_in_{d.label}_box_{x1}_{y1}_{x2}_{y2}.jpg"
                pictures[b.image] = crops[k]
            blocks.append(b)
            out_images.append(images[k])
        return number_blocks(blocks, self.ignore), out_images, pictures

    def _prepare(self, region, prompt, task):
        """(prep, lines) of one region. A PaddleOCR-VL recogniser (not a line reader) gets the region pixel bounds
        PaddleX asks for every task; others keep their checkpoint's."""
        vlm = self.vlm
        if self.region_pixels is None or self.spec.name != PADDLEX_RECOGNIZER or vlm.line_height:
            return vlm.prepare_request([region], prompt)
        vlm = copy.copy(vlm)
        vlm.task_inputs = dataclasses.replace(vlm.task_inputs, pixels={**vlm.task_inputs.pixels,
                                                                       task: tuple(self.region_pixels)})
        return vlm.prepare_request([region], prompt, task=task)

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
                prep, lines = self._prepare(region, prompt, task)  # a line reader: the region's lines
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


def locate_layout(layout_path=None, version=None):
    """(layout checkpoint folder, PipelineVersion): --layout-model-path, or the forced version's default checkpoint
    (1.0's without either); the version the folder's model_type runs, checked against a forced one."""
    from ms_ocr.weights import locate_folder
    default = V.VERSIONS[version or V.DEFAULT]
    folder = locate_folder(default.layout_name, default.layout_hub_id, layout_path, flag="--layout-model-path")
    return folder, V.select(version, V.layout_model_type(folder))
