"""A chat request's model inputs: the model's own prompt (chat template, image placement) as `infer` builds it,
with the client's system message and mm_processor_kwargs (min_pixels / max_pixels) applied per request."""

import copy
import dataclasses

from ms_ocr.serve.protocol import ApiError


def request_processor(processor, system, mm_kwargs):
    """The pipeline's processor, or a per-request copy with the system turn / pixel bounds changed."""
    pixels = {k: v for k, v in (mm_kwargs or {}).items() if v is not None}
    if system is None and not pixels:
        return processor
    proc = copy.copy(processor)
    if pixels:
        settings = getattr(processor, "settings", None)
        if settings is None or not hasattr(settings, "min_pixels"):
            raise ApiError(400, "mm_processor_kwargs min_pixels/max_pixels are not supported by this model",
                           param="mm_processor_kwargs")
        new = dataclasses.replace(settings, **pixels)
        if new.min_pixels > new.max_pixels:
            raise ApiError(400, f"mm_processor_kwargs: min_pixels {new.min_pixels} > max_pixels {new.max_pixels}",
                           param="mm_processor_kwargs")
        proc.settings = new
    if system is not None and hasattr(processor, "messages"):
        own = processor.messages

        def messages(prompt, num_images):  # the client's system turn replaces the model's default one
            return [{"role": "system", "content": system}] + [m for m in own(prompt, num_images)
                                                              if m["role"] != "system"]
        proc.messages = messages
    return proc


def prepare(pipe, conversation, images, mm_kwargs=None):
    """(Prepared, prompt text) for one request; models without a chat template (DeepSeek-OCR) get the system
    text, if any, before the user's text."""
    proc = request_processor(pipe.processor, conversation.system, mm_kwargs)
    prompt = conversation.prompt
    if conversation.system and not hasattr(pipe.processor, "messages"):
        prompt = conversation.system + "\n" + prompt
    view = copy.copy(pipe)
    view.processor = proc
    try:
        prep, _ = view.prepare(images, prompt)
    except ValueError as e:  # ImageError (bad aspect ratio, ...) and prompt/template mismatches
        raise ApiError(400, " ".join(str(e).split()), param="messages") from None
    return prep
