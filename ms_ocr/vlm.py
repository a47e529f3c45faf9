"""A loaded VLM ready to answer: processor + runtime, model-agnostic; requests run through ms_ocr.engine."""

import copy
import dataclasses
import time

import numpy as np

from ms_ocr.compile_cache import CompileCache
from ms_ocr.proc import peak_rss_gb, process_age_ms, rss_gb
from ms_ocr.runtime import Prepared, release_weights


@dataclasses.dataclass(frozen=True)
class TaskInputs:
    """What a named task changes around the model, as its reference client does (ModelSpec task_pixels,
    task_image, special_token_tasks): the pixel bounds its images are resized to, the image it sends, and whether
    the answer keeps its special tokens (boxes written as tokens). Tasks it does not name are left alone."""

    pixels: dict = dataclasses.field(default_factory=dict)  # task -> (min_pixels, max_pixels)
    image: object = None  # (PIL image, task) -> PIL image
    special_tokens: tuple = ()
    prompts: dict = dataclasses.field(default_factory=dict)  # task -> its prompt (to know a client's task)

    def processor(self, processor, task):
        if task not in self.pixels:
            return processor
        lo, hi = self.pixels[task]
        out = copy.copy(processor)
        out.settings = dataclasses.replace(processor.settings, min_pixels=lo, max_pixels=hi)
        return out

    def images(self, images, task):
        return images if task is None or self.image is None else [self.image(img, task) for img in images]

    def keeps_special_tokens(self, task):
        return task in self.special_tokens

    def task_of(self, prompt):
        """The task whose prompt `prompt` is (surrounding whitespace aside), or None."""
        text = (prompt or "").strip()
        return next((task for task, own in self.prompts.items() if own == text), None)

    def max_pixels(self, settings, prompt=None):
        """The most pixels a request's images may be resized to: the checkpoint's bound, or the bound of the task
        whose prompt the request sends when that is larger (PaddleX asks 1,605,632 pixels for `Spotting:`)."""
        task = self.task_of(prompt)
        return max(settings.max_pixels, self.pixels[task][1]) if task in self.pixels else settings.max_pixels


def cap_pixels(pipe, max_pixels):
    """Resize the pipeline's images to at most `max_pixels` pixels (--max-pixels): the checkpoint's bound lowered,
    and each task's own bound (TaskInputs.pixels) with it. ValueError for a model without pixel bounds, a cap above
    the checkpoint's bound or below one merged patch."""
    from ms_ocr.processing.vlm_processor import VLMProcessor
    if not isinstance(pipe.processor, VLMProcessor):
        raise ValueError(f"--max-pixels applies to models that resize to a pixel budget, not {pipe.name}")
    settings = pipe.processor.settings
    floor = (settings.patch_size * settings.merge_size) ** 2
    if not floor <= max_pixels <= settings.max_pixels:
        raise ValueError(f"--max-pixels must be in {floor}..{settings.max_pixels} (one merged patch .. the "
                         f"checkpoint's max_pixels), not {max_pixels}")
    pipe.processor.settings = dataclasses.replace(settings, max_pixels=max_pixels,
                                                  min_pixels=min(settings.min_pixels, max_pixels))
    capped = {task: (min(lo, max_pixels), min(hi, max_pixels)) for task, (lo, hi) in pipe.task_inputs.pixels.items()}
    pipe.task_inputs = dataclasses.replace(pipe.task_inputs, pixels=capped)


def text_line_height(model_dir):
    """preprocessor_config.json's `text_line_height` (an ms_ocr key: the checkpoint reads single text lines of this
    height, the demo model), or None. Read for the models whose ModelSpec says line_reader."""
    from ms_ocr.processing.settings import read_image_processor_dict
    raw = read_image_processor_dict(model_dir, required=False) if model_dir else None
    height = (raw or {}).get("text_line_height")
    return int(height) if height else None


class VLMPipeline:
    """Glue between a model package and the generic runtime.

    `vision_inputs(processed) -> list[runtime.VisionInputs]` turns one request's images into the vision
    steps' inputs, one per image; `num_pos_axes` is the number of rope position rows the decoder takes;
    `postprocess(text, task, images) -> (text, extras)` is the model's output handling (cleanup, parsed boxes).
    `line_height`: the height of the single text lines the checkpoint reads (a line reader: ms_ocr/line_reader.py),
    or None. `spec`: the ModelSpec of the checkpoint's version (set by ModelSpec.load); `postprocess_options`:
    keyword options an entry point passes to `postprocess` over the spec's defaults (e.g. clean_up_from).
    """

    def __init__(self, name, model_dir, cfg, processor, runtime, vision_inputs, eos_ids, num_pos_axes,
                 image_token_id, load_seconds=0.0, postprocess=None, task_inputs=None, line_height=None):
        self.name = name
        self.model_dir = model_dir
        self.cfg = cfg
        self.processor = processor
        self.runtime = runtime
        self.vision_inputs = vision_inputs
        self.eos_ids = list(eos_ids)
        self.num_pos_axes = num_pos_axes
        self.image_token_id = image_token_id
        self.load_seconds = load_seconds
        self.postprocess = postprocess
        self.task_inputs = task_inputs or TaskInputs()
        self.load_rss_gb = rss_gb()
        self.runs = 0
        self._load_text, self._vision_params = None, ()
        self.line_height = line_height
        self.spec = None
        self.postprocess_options = {}
        # a line reader's streams get the ids of "\n" between two lines (line_reader.LineReader)
        self.line_break_ids = tuple(processor.tokenizer.encode("\n", add_special_tokens=False)) \
            if line_height else ()

    def stage_text_weights(self, load_text, vision_params):
        """The text weights are not loaded yet (models/loading.staged_weights): `load_text()` loads them; the
        Parameters `vision_params` are released first (a one-request process needs them no more)."""
        self._load_text, self._vision_params = load_text, list(vision_params)

    def ensure_text_weights(self, release_vision=False):
        """Load the staged text weights, if any (release_vision: free the vision weights first)."""
        if self._load_text is None:
            return
        t0 = time.perf_counter()
        if release_vision:
            release_weights(self._vision_params)  # their memory goes back to the pool the text weights fill
        self._vision_params = ()
        load, self._load_text = self._load_text, None
        load()
        self.load_seconds += time.perf_counter() - t0

    def prepare(self, images, prompt, task=None):
        """Model inputs for `images` and `prompt`; a named `task` resizes and prepares its images as the model's
        reference client does (TaskInputs)."""
        out = self.task_inputs.processor(self.processor, task)(self.task_inputs.images(images, task), prompt)
        prep = Prepared(input_ids=np.asarray(out["input_ids"], np.int64),
                        position_ids=np.asarray(out["position_ids"], np.int64),
                        rope_delta=int(out["rope_delta"]),
                        image_token_mask=np.asarray(out["input_ids"]) == self.image_token_id,
                        vision_inputs=self.vision_inputs(out) if images else [])
        return prep, out

    def encode_images(self, prep):
        return self.runtime.encode_images(prep.vision_inputs) if prep.vision_inputs else None

    def prepare_request(self, images, prompt, task=None, max_lines=None):
        """(prep, lines) of one request: a line reader (line_height: the demo model) given one image reads each text
        line of it scaled to that height (processing/text_lines.py), and lines = [(line's ImageSize, Prepared)],
        prep None (line_reader.LineRequest.lines: each line's pixels are in its
        Prepared, only its size is kept); otherwise prep and lines None. A line reader's image of more than
        `max_lines` lines: text_lines.TooManyLines, found before any line is prepared."""
        if self.line_height and len(images) == 1:
            from ms_ocr.processing.image import ImageSize
            from ms_ocr.processing.text_lines import line_images
            return None, [(ImageSize(*line.size), self.prepare([line], prompt, task)[0])
                          for line in line_images(images[0], self.line_height, max_lines=max_lines)]
        return self.prepare(images, prompt, task)[0], None

    def run(self, images, prompt, sampling, on_token=None, task=None, on_logits=None, release_vision=False,
            ignore_eos=False):
        """OCR one request: a batch of one through BatchEngine, the loop batch jobs and the server run. Returns
        dict(text, token_ids, finish_reason, timings in ms / tokens per s) plus the model's extras for the task
        (e.g. "boxes"). `on_token(id)` sees each token as it is chosen; `on_logits(logits)` each step's raw logits
        [V] (float32, before penalties and sampling), in order, once the request has finished. `release_vision`:
        no image size of this request comes back in this process: the vision graphs are freed once its images
        are encoded (and, loaded in stages, each ViT layer's weights once the layer has run). A line reader reads
        the lines of a one-image request one after the other (prepare_request): their texts joined by "\n",
        tokens in order, timings summed (`timings.lines`: how many). `ignore_eos`: the answer runs to the token
        budget (vLLM's ignore_eos: benchmarks)."""
        from ms_ocr import line_reader
        from ms_ocr.engine import BatchEngine
        sampling.validate()
        compile_before = dict(self.runtime.compiler.seconds)
        t0 = time.perf_counter()
        prep, lines = self.prepare_request(images, prompt, task)
        longest = max(p.input_ids.shape[0] for p in line_reader.prepared(prep, lines))
        release_vision = release_vision and lines is None  # each line's vision graphs run again for the next
        startup = process_age_ms() if self.runs == 0 else None  # launch to the first vision op
        self.runs += 1
        t1 = time.perf_counter()
        staged = self._load_text is not None
        # staged (one request) and no image size comes back: each ViT layer's weights are freed once it has run
        self.runtime.release_after_vision(graphs=release_vision, layers=staged and release_vision)
        engine = BatchEngine(self, sampling, max_batch_size=1, max_input_length=int(longest),
                             max_output_length=sampling.max_new_tokens, text_after_vision=staged)
        done = {}

        def token(tok):
            on_token(tok)
            return False  # never ends the sequence: eos and the token budget do

        request = line_reader.request("request", images, prompt, prep=prep, lines=lines, task=task, sampling=sampling,
                                      dump=on_logits is not None, on_token=token if on_token is not None else None,
                                      ignore_eos=ignore_eos)
        try:
            line_reader.run(engine, [request], lambda req, result, error: done.update(result=result, error=error))
        finally:
            self.runtime.release_after_vision()
        if done["error"] is not None:
            raise done["error"]
        out = done["result"]
        t = out.pop("timings")
        dump = out.pop("dump", None)
        if on_logits is not None:
            for row in dump["logits"]:
                on_logits(row)
        compiled = {k: v - compile_before.get(k, 0.0) for k, v in self.runtime.compiler.seconds.items()}
        timings = {
            "load_ms": 1000 * self.load_seconds,
            "preprocess_ms": 1000 * (t1 - t0),
            "vision_ms": t["vision_ms"],
            "prefill_ms": t["prefill_ms"],
            "decode_tokens_per_s": t["decode_tokens_per_s"],
            "decode_tokens": t["decode_tokens"],
            "compile_ms": {family: 1000 * compiled.get(family, 0.0) for family in ("vision", "prefill", "decode")},
            "prompt_tokens": t["prompt_tokens"],
            "kv_cache_dtype": self.runtime.kv_cache_dtype,  # what decode read per cached position
            # resident memory after load and after each phase of this request, and the peak so far
            "rss_gb": {"load": self.load_rss_gb, **engine.rss, "decode": rss_gb(), "peak": peak_rss_gb()},
        }
        if "lines" in t:
            timings["lines"] = t["lines"]
        if startup is not None:
            timings["startup_ms"] = startup
        cache = CompileCache.active
        if cache is not None:  # graphs of this process so far: read from the compile cache / compiled and stored
            timings["compile_cache"] = {"on": cache.enabled, "loaded": cache.loaded, "written": cache.written}
        out["timings"] = timings
        return out

    def finish(self, token_ids, finish_reason, task, images):
        """Generated ids -> dict(text, token_ids, finish_reason) plus the model's extras for the task."""
        text = self.processor.decode([t for t in token_ids if t not in self.eos_ids],
                                     skip_special_tokens=not self.task_inputs.keeps_special_tokens(task))
        extras = {}
        if self.postprocess is not None:
            text, extras = self.postprocess(text, task, images, **self.postprocess_options)
        return {"text": text, "token_ids": list(token_ids), "finish_reason": finish_reason, **extras}
