"""The OpenAI chat-completions request as vLLM's server accepts it from OCR clients, and OpenAI's error shape.

Fields the OCR clients send (PaddleX's GenAIClient, HunyuanOCR's and DeepSeek-OCR's vLLM recipes) are typed
and checked; other fields the openai client may add (user, n=1, logprobs=false, ...) are ignored as vLLM does.
"""

import asyncio
import json
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ApiError(Exception):
    """An error answered as {"error": {"message", "type", "param", "code"}} with HTTP status `status`."""

    TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 408: "RequestTimeoutError",
             413: "RequestTooLargeError", 500: "InternalServerError", 503: "ServiceUnavailableError"}

    def __init__(self, status, message, param=None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self):
        return {"error": {"message": self.message, "type": self.TYPES.get(self.status, "Error"), "param": self.param,
                          "code": self.status}}


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class ImageURL(_Model):
    url: str
    detail: Optional[str] = None


class ContentPart(_Model):
    type: Literal["text", "image_url"]
    text: Optional[str] = None
    image_url: Optional[Union[ImageURL, str]] = None


class Message(_Model):
    role: str
    content: Optional[Union[str, list[ContentPart]]] = None


class StreamOptions(_Model):
    include_usage: bool = False


class MMProcessorKwargs(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    min_pixels: Optional[int] = Field(None, ge=1)
    max_pixels: Optional[int] = Field(None, ge=1)


class VllmXargs(BaseModel):
    """DeepSeek-OCR's NGramPerReqLogitsProcessor arguments (vLLM SamplingParams.extra_args)."""
    model_config = ConfigDict(extra="forbid")
    ngram_size: int = Field(0, ge=0)
    window_size: int = Field(0, ge=0)
    whitelist_token_ids: list[int] = Field(default_factory=list)


class ChatCompletionRequest(_Model):
    model: Optional[str] = None
    messages: list[Message] = Field(min_length=1)
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0)
    top_p: Optional[float] = Field(None, gt=0, le=1)
    top_k: Optional[int] = Field(None, ge=-1)
    seed: Optional[int] = Field(None, ge=-2 ** 63, le=2 ** 63 - 1)  # vLLM's range (a 64-bit integer)
    repetition_penalty: Optional[float] = Field(None, gt=0)
    stop: Optional[Union[str, list[str]]] = None
    skip_special_tokens: bool = True
    skip_postprocess: bool = False  # ms_ocr's own: the raw decoded text instead of the model's post-processing
    early_stop: Optional[bool] = None  # ms_ocr's own: false drops the model's stop rules (default: the model's)
    ignore_eos: bool = False
    mm_processor_kwargs: Optional[MMProcessorKwargs] = None
    vllm_xargs: Optional[VllmXargs] = None
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    n: int = Field(1, ge=1, le=1)


def _no_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def _check_strings(value, where="body"):
    """Every string must be encodable text: a lone surrogate escape ("\ud800") is valid JSON but no text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, f"invalid field {where}: the string holds a lone surrogate (\\ud800-\\udfff), "
                                "not text", param=where) from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_strings(k, where)
            _check_strings(v, k if where == "body" else f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_strings(v, f"{where}.{i}")


def decode_body(raw):
    """The request's bytes -> a JSON object, or ApiError(400)."""
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the request body is not valid JSON") from None
    except RecursionError:  # json's own depth guard (100,000-deep brackets)
        raise ApiError(400, "the request body is nested too deeply") from None
    try:
        _check_strings(body)
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply") from None
    return body


def parse_chat_request(body):
    """A decoded JSON body -> ChatCompletionRequest, or ApiError(400) naming the first bad field."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        req = ChatCompletionRequest.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ApiError(400, f"invalid field {where}: {err['msg']}", param=where) from None
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if any(not s for s in stops):
        raise ApiError(400, "invalid field stop: stop strings must not be empty", param="stop")
    req.stop = stops
    return req


class Conversation:
    """What a chat request asks of an OCR model: a system text (or None), the user's text and image URLs."""

    def __init__(self, system, prompt, image_urls):
        self.system, self.prompt, self.image_urls = system, prompt, image_urls


def read_messages(messages):
    """Messages -> Conversation. System and user turns only; text parts are joined with newlines (as vLLM joins
    the parts of a string-content template) and the images go where the model's own prompt puts them."""
    system, texts, urls = [], [], []
    for i, m in enumerate(messages):
        if m.role not in ("system", "user"):
            raise ApiError(400, f"messages[{i}].role {m.role!r} is not supported (system and user only)",
                           param=f"messages.{i}.role")
        parts = [] if m.content is None else [m.content] if isinstance(m.content, str) else m.content
        for j, part in enumerate(parts):
            if isinstance(part, str):
                (system if m.role == "system" else texts).append(part)
            elif part.type == "text":
                if part.text is None:
                    raise ApiError(400, f"messages[{i}].content[{j}] has no text", param=f"messages.{i}.content")
                (system if m.role == "system" else texts).append(part.text)
            else:
                if m.role == "system":
                    raise ApiError(400, f"messages[{i}]: images go in user messages", param=f"messages.{i}.content")
                url = part.image_url.url if isinstance(part.image_url, ImageURL) else part.image_url
                if not url:
                    raise ApiError(400, f"messages[{i}].content[{j}] has no image_url.url",
                                   param=f"messages.{i}.content")
                urls.append(url)
    if not texts and not urls:
        raise ApiError(400, "the messages hold no user text or image", param="messages")
    has_system = any(m.role == "system" for m in messages)
    return Conversation("\n".join(system) if has_system else None, "\n".join(texts), urls)


async def read_body(http_request, limit, timeout):
    """The body, refused with 413 past `limit` bytes (read in chunks: a huge body is never held whole) and with
    408 when it has not all arrived within `timeout` seconds (a client trickling bytes holds no connection for
    ever)."""
    declared = http_request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the request body is larger than the server's limit of {limit} bytes")

    async def read():
        chunks, size = [], 0
        async for chunk in http_request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the request body is larger than the server's limit of {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), timeout)
    except asyncio.TimeoutError:
        raise ApiError(408, f"the request body did not arrive within {timeout:g} s") from None
