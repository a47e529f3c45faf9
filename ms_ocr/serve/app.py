"""The HTTP routes (FastAPI): /v1/models, /v1/chat/completions (JSON or server-sent events), /health, /metrics."""

import asyncio
import hmac
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ms_ocr.engine import Cancelled
from ms_ocr.line_reader import prepared
from ms_ocr.errors import user_error_message
from ms_ocr.generate import SamplingConfig
from ms_ocr.serve import media, page
from ms_ocr.serve.metrics import Metrics
from ms_ocr.serve.prompt import prepare
from ms_ocr.serve.protocol import ApiError, decode_body, parse_chat_request, read_body, read_messages
from ms_ocr.serve.worker import Job, ShuttingDown
from ms_ocr.textstream import TextStream


# Threads that decode and prepare requests' images. Few, and their own: the allocator keeps freed memory per thread
# (glibc's arenas, jemalloc's thread caches), so a page's transient decoding memory stayed resident once per thread
# that had decoded one (with the event loop's default pool of 6 threads). The decode budget (media.DecodeBudget)
# bounds how many pixels they hold at once.
DECODE_THREADS = 2


@dataclass
class ServerState:
    pipe: object
    worker: object
    model_name: str
    max_model_len: int
    limits: media.MediaLimits
    metrics: Metrics
    created: int = 0
    fetch_pool: object = None  # threads for requests with http(s) image URLs
    decode_pool: object = None  # the threads that decode and prepare images (DECODE_THREADS)
    api_key: str = None        # clients must send "Authorization: Bearer <key>" to /v1/* (None: open)
    max_lines: int = 128       # a line reader's text lines per request (--max-lines-per-request)
    body_timeout: float = 60.0  # seconds a client may take to send its request body
    stall_timeout: float = 30.0  # seconds a stream may wait for a client that does not read it
    spec: object = None        # the ModelSpec of the checkpoint's version: its decoding defaults (sampling_for)


def _short(exc, limit=300):
    """One line, at most `limit` characters (MindSpore errors carry whole C++ and graph traces)."""
    text = user_error_message(exc)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _error(status, message, param=None):
    return JSONResponse(ApiError(status, message, param).body(), status_code=status)


def sampling_for(req, max_new, spec=None):
    """The request's SamplingConfig (greedy unless a temperature is given). What the request does not name is the
    model's decoding as its reference client runs it (`spec`, the checkpoint version's ModelSpec:
    repetition_penalty, stop_rules; ms_ocr's own request field `early_stop: false` drops the stop rules)."""
    x = req.vllm_xargs
    seed = None if req.seed is None else req.seed % 2 ** 64  # vLLM takes any 64-bit seed: negative ones wrap
    penalty = spec.repetition_penalty if spec is not None else 1.0
    rules = tuple(spec.stop_rules) if spec is not None and req.early_stop is not False else ()
    return SamplingConfig(max_new_tokens=max_new, temperature=req.temperature or 0.0,
                          top_p=req.top_p if req.top_p is not None else 1.0,
                          top_k=max(req.top_k or 0, 0),
                          repetition_penalty=req.repetition_penalty if req.repetition_penalty is not None else penalty,
                          no_repeat_ngram_size=x.ngram_size if x else 0, no_repeat_window=x.window_size if x else 0,
                          no_repeat_exempt=tuple(x.whitelist_token_ids) if x else (), seed=seed, stop_rules=rules)


def create_app(state):
    app = FastAPI(title="ms_ocr", docs_url=None, redoc_url=None, openapi_url=None)
    if state.fetch_pool is None:
        state.fetch_pool = ThreadPoolExecutor(8, thread_name_prefix="ms_ocr-fetch")
    if state.decode_pool is None:
        state.decode_pool = ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="ms_ocr-decode")
    app.state.ms_ocr = state

    @app.exception_handler(ApiError)
    async def api_error(request, exc):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, exc):
        return _error(400, f"invalid request: {exc.errors()[0].get('msg', 'bad input')}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc):
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def internal_error(request, exc):  # one line, never a traceback
        return _error(500, _short(exc))

    @app.middleware("http")
    async def api_key(request, call_next):  # as vLLM's --api-key: the /v1 routes need the key, /health does not
        if state.api_key is not None and request.url.path.startswith("/v1"):
            given = request.headers.get("authorization", "")
            expected = f"Bearer {state.api_key}"
            if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"),
                                       expected.encode("utf-8", "surrogateescape")):
                state.metrics.count_request(401)
                return _error(401, "invalid or missing API key (send the header Authorization: Bearer <key>)")
        return await call_next(request)

    @app.get("/health")
    async def health():  # 200 only while the engine loop runs: a dead engine answers nothing else
        return Response(status_code=200 if state.worker.alive() else 503)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": state.model_name, "object": "model", "created": state.created,
                                            "owned_by": "ms_ocr", "root": state.model_name, "parent": None,
                                            "max_model_len": state.max_model_len}]}

    @app.get("/metrics")
    async def metrics():
        running, waiting = state.worker.counts()
        engine = state.worker.engine
        text = state.metrics.render(running, waiting, dict(engine.step_sizes), engine.batch,
                                    dict(engine.rt.compiler.seconds), dict(engine.step_rows))
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        try:
            return await _chat(state, request)
        except ApiError as e:
            state.metrics.count_request(e.status)
            raise
        except Cancelled:  # the client went away: nobody reads an answer, and it is no server error to log
            return Response(status_code=499)

    page.install(app, state)  # the browser page at / and the endpoints it uses (serve/page.py)
    return app


def _decode_and_prepare(state, conversation, encoded, pixels, mm):
    """The request's model inputs, its images decoded within the server's decode budget (media.Decoded): the
    full-size pixels are held only until the processor has resized them."""
    with media.Decoded(encoded, pixels, state.limits) as images:
        return prepare(state.pipe, conversation, images, mm, state.max_lines)


async def _chat(state, http_request):
    arrival = time.perf_counter()
    req = parse_chat_request(decode_body(await read_body(http_request, state.limits.max_request_bytes,
                                                          state.body_timeout)))
    if req.model is not None and req.model != state.model_name:
        raise ApiError(404, f"The model `{req.model}` does not exist.", param="model")
    conversation = read_messages(req.messages)
    if not state.worker.reserve():
        raise ApiError(503, f"the server is busy: {state.worker.capacity} requests are running or waiting "
                            "(--max-num-seqs + --max-queue); retry later")
    submitted = False
    try:
        loop = asyncio.get_running_loop()
        remote = any(media.is_remote(u) for u in conversation.image_urls)  # slow sources never hold local work
        encoded, pixels = await loop.run_in_executor(state.fetch_pool if remote else None, media.read_images,
                                                     conversation.image_urls, state.limits)
        mm = req.mm_processor_kwargs.model_dump() if req.mm_processor_kwargs else None
        prep, lines = await loop.run_in_executor(state.decode_pool, _decode_and_prepare, state, conversation, encoded,
                                                 pixels, mm)
        del encoded
        # a line reader's lines are sequences of their own, but one answer: their prompts and the completion they
        # share (its max_tokens) are the request's context
        n_prompt = sum(int(p.input_ids.shape[0]) for p in prepared(prep, lines))
        asked = req.max_completion_tokens or req.max_tokens
        max_new = asked if asked is not None else state.max_model_len - n_prompt
        if n_prompt + max(max_new, 1) > state.max_model_len:
            raise ApiError(400, f"This model's maximum context length is {state.max_model_len} tokens. However, "
                                f"you requested {n_prompt + max(max_new, 0)} tokens ({n_prompt} in the messages, "
                                f"{max(max_new, 0)} in the completion). Please reduce the length of the messages "
                                "or completion.", param="max_tokens")
        sampling = sampling_for(req, max_new, state.spec)
        try:
            sampling.validate()
        except ValueError as e:
            raise ApiError(400, f"invalid sampling settings: {e}") from None
        key = f"chatcmpl-{uuid.uuid4().hex}"
        stream = TextStream(state.pipe.processor.tokenizer, req.skip_special_tokens, state.pipe.eos_ids, req.stop)
        events = asyncio.Queue()
        # the task whose prompt the request sends decides the model's post-processing of its answer (e.g.
        # HunyuanOCR-1.5's doc_parse normalisation), as Tencent's clients decide it by the prompt
        task = state.pipe.task_inputs.task_of(conversation.prompt)
        job = Job(key, prep, sampling, stream, loop, events, state.metrics, arrival, lines=lines,
                  ignore_eos=req.ignore_eos, postprocess=not req.skip_postprocess, task=task)
        state.worker.submit(job)
        submitted = True
    finally:
        if not submitted:
            state.worker.release()
    if req.stream:
        return GuardedStream(_sse(state, req, job, job.n_prompt), job, state.stall_timeout,
                             media_type="text/event-stream")
    try:
        text = await _collect(job, http_request)
    finally:
        state.worker.release()
    completion = job.n_tokens
    state.metrics.count_request(200, job.finish_reason)
    return {"id": job.key, "object": "chat.completion", "created": int(time.time()), "model": state.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "reasoning_content": None,
                                                 "tool_calls": []},
                         "logprobs": None, "finish_reason": job.finish_reason, "stop_reason": None}],
            "usage": {"prompt_tokens": job.n_prompt, "completion_tokens": completion,
                      "total_tokens": job.n_prompt + completion}}


def _engine_error(exc):
    if isinstance(exc, ShuttingDown):
        return ApiError(503, "the server is shutting down; the request was not finished (retry on another server)")
    if isinstance(exc, ValueError):
        return ApiError(400, _short(exc))
    return ApiError(500, _short(exc))


class GuardedStream(StreamingResponse):
    """A stream that ends, and frees its request, when the client stops reading: a send that cannot go out within
    `stall` seconds (the socket's buffers full) cancels the request and closes the connection, so a client that
    never reads its stream holds no slot."""

    def __init__(self, content, job, stall, **kw):
        super().__init__(content, **kw)
        self.job, self.stall = job, stall

    async def __call__(self, scope, receive, send):
        async def guarded(message):
            try:
                await asyncio.wait_for(send(message), self.stall)
            except asyncio.TimeoutError:
                self.job.cancelled.set()
                raise OSError(f"client did not read its stream for {self.stall:g} s") from None

        try:
            await super().__call__(scope, receive, guarded)
        except OSError:
            pass  # the connection is dropped: the generator was closed, its request cancelled


async def _collect(job, http_request):
    """Wait for the whole answer (the generated ids decoded at once, as `infer` does, or the text cut at a stop
    string); a client that goes away cancels its request (its slot frees at once)."""
    try:
        while True:
            try:
                kind, value = await asyncio.wait_for(job.events.get(), timeout=0.5)
            except asyncio.TimeoutError:
                if await http_request.is_disconnected():
                    job.cancelled.set()
                    raise Cancelled("client disconnected") from None
                continue
            if kind == "done":
                return job.text
            if kind == "error":
                raise _engine_error(value)
    except BaseException:
        job.cancelled.set()
        raise


def _chunk(job, state, delta, finish=None, usage=None, choices=True):
    out = {"id": job.key, "object": "chat.completion.chunk", "created": int(time.time()), "model": state.model_name,
           "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}] if choices else []}
    if usage is not None:
        out["usage"] = usage
    return f"data: {json.dumps(out, ensure_ascii=False)}\n\n"


async def _sse(state, req, job, n_prompt):
    """Server-sent events: a role chunk, content deltas, a chunk with finish_reason, the usage chunk if asked,
    `data: [DONE]`. If the client disconnects, the generator is closed and the request cancelled."""
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    try:
        yield _chunk(job, state, {"role": "assistant", "content": ""})
        while True:
            kind, value = await job.events.get()
            if kind == "delta":
                yield _chunk(job, state, {"content": value})
            elif kind == "done":
                yield _chunk(job, state, {}, finish=value)
                if include_usage:
                    usage = {"prompt_tokens": n_prompt, "completion_tokens": job.n_tokens,
                             "total_tokens": n_prompt + job.n_tokens}
                    yield _chunk(job, state, None, usage=usage, choices=False)
                state.metrics.count_request(200, value)
                break
            else:
                err = _engine_error(value)
                state.metrics.count_request(err.status)
                yield f"data: {json.dumps(err.body())}\n\n"
                break
        yield "data: [DONE]\n\n"
    finally:
        job.cancelled.set()  # no-op once finished; frees the slot when the client went away
        state.worker.release()
