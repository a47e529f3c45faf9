"""A chat request's model inputs: the model's own prompt (chat template, image placement) as `infer` builds it,
with the client's system message and mm_processor_kwargs (min_pixels / max_pixels) applied per request."""

import copy
import dataclasses

from ms_ocr.processing.text_lines import TooManyLines
from ms_ocr.processing.vlm_processor import VLMProcessor
from ms_ocr.serve.protocol import ApiError


def clamp_pixels(settings, pixels, top=None):
    """A request's min_pixels / max_pixels within the checkpoint's own bounds (its preprocessor config, or `top`:
    the bound of the task the request is, e.g. PaddleOCR-VL spotting's 1,605,632): a page is never resized to more
    pixels than that, whatever a client asks (a line asked to be 1e8 pixels would take gigabytes), nor below one patch
    merge; min_pixels stays <= max_pixels. Done before any pixel work."""
    top = settings.max_pixels if top is None else top
    floor = (settings.patch_size * settings.merge_size) ** 2
    hi = min(max(pixels.get("max_pixels", top), floor), top)
    lo = min(max(pixels.get("min_pixels", min(settings.min_pixels, hi)), floor), hi)
    return {"min_pixels": lo, "max_pixels": hi}


def request_processor(processor, system, mm_kwargs, task_inputs=None, prompt=None):
    """The pipeline's processor, or a per-request copy with the system turn / pixel bounds changed (bounded as
    clamp_pixels says: by the checkpoint's bound, or by the task's in `task_inputs` when `prompt` is a task's). Only
    a VLMProcessor (a chat template and pixel bounds) takes them; other processors get the system text before the
    prompt (prepare)."""
    pixels = {k: v for k, v in (mm_kwargs or {}).items() if v is not None}
    if system is None and not pixels:
        return processor
    proc = copy.copy(processor)
    if pixels:
        if not isinstance(processor, VLMProcessor):
            raise ApiError(400, "mm_processor_kwargs min_pixels/max_pixels are not supported by this model",
                           param="mm_processor_kwargs")
        if pixels.get("min_pixels", 0) > pixels.get("max_pixels", float("inf")):
            raise ApiError(400, f"mm_processor_kwargs: min_pixels {pixels['min_pixels']} > max_pixels "
                                f"{pixels['max_pixels']}", param="mm_processor_kwargs")
        settings = processor.settings
        top = task_inputs.max_pixels(settings, prompt) if task_inputs is not None else None
        proc.settings = dataclasses.replace(settings, **clamp_pixels(settings, pixels, top))
    if system is not None and isinstance(processor, VLMProcessor):
        own = processor.messages

        def messages(prompt, num_images):  # the client's system turn replaces the model's default one
            return [{"role": "system", "content": system}] + [m for m in own(prompt, num_images)
                                                              if m["role"] != "system"]
        proc.messages = messages
    return proc


def prepare(pipe, conversation, images, mm_kwargs=None, max_lines=None):
    """(Prepared, lines) for one request (VLMPipeline.prepare_request: a line reader's one image gives its text
    lines, each prepared, and no Prepared of its own); models without a chat template (DeepSeek-OCR) get the system
    text, if any, before the user's text."""
    proc = request_processor(pipe.processor, conversation.system, mm_kwargs, pipe.task_inputs, conversation.prompt)
    prompt = conversation.prompt
    if conversation.system and not isinstance(pipe.processor, VLMProcessor):
        prompt = conversation.system + "\n" + prompt
    view = copy.copy(pipe)
    view.processor = proc
    try:
        return view.prepare_request(images, prompt, max_lines=max_lines)
    except TooManyLines as e:
        raise ApiError(400, f"the image has {e.count} text lines; this server reads at most {e.limit} per request "
                            "(--max-lines-per-request)", param="messages") from None
    except ValueError as e:  # ImageError (bad aspect ratio, ...) and prompt/template mismatches
        raise ApiError(400, " ".join(str(e).split()), param="messages") from None
