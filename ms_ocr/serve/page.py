"""The browser page at `/` (docs/serving.md, "The page"): its static files (ms_ocr/serve/static/, no build step)
served under a strict Content-Security-Policy, and the ms_ocr endpoints it uses besides /v1/chat/completions:
the model's tasks (GET /v1/tasks), PDF pages (POST /v1/pages, /v1/pages/render) and the model's own
post-processing of an answer, its boxes included (POST /v1/postprocess). Being under /v1 they need the API key."""

import asyncio
import os

from fastapi import Request
from fastapi.responses import Response

from ms_ocr import models
from ms_ocr.processing.image import ImageSize
from ms_ocr.serve.pdf_pages import DEFAULT_DPI, PdfPages
from ms_ocr.serve.protocol import ApiError, decode_body, read_body

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
# Scripts and styles from the server's own files only (no inline script or style, no eval), images from the server
# and from the page's own blob: URLs (the opened file), requests to the server only; no plugins, no framing, no
# <base> or form redirection.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY", "Cache-Control": "no-cache"}
MAX_ANSWER_CHARS = 2 ** 20  # an answer sent back for post-processing (--max-model-len tokens are far fewer)
MAX_SIDE = 10 ** 6  # the image size an answer's boxes are scaled to


def static_files(folder=STATIC):
    """{name: (bytes, content type)} of the page's files (read once: a handful of small files)."""
    out = {}
    for name in sorted(os.listdir(folder)):
        kind = TYPES.get(os.path.splitext(name)[1])
        if kind is not None:
            with open(os.path.join(folder, name), "rb") as f:
                out[name] = (f.read(), kind)
    return out


def task_list(spec, state):
    """The page's configuration: the served model's tasks (ModelSpec: name, prompt, whether the answer has boxes,
    and the request fields the model's reference client sends with it) and the server's limits."""
    tasks = []
    for name, prompt in spec.tasks.items():
        fields = {}
        if name in spec.special_token_tasks:  # boxes written as special tokens (PaddleOCR-VL's <|LOC_n|>)
            fields["skip_special_tokens"] = False
        if spec.task_pixels and name in spec.task_pixels:
            low, high = spec.task_pixels[name]
            fields["mm_processor_kwargs"] = {"min_pixels": low, "max_pixels": high}
        tasks.append({"name": name, "prompt": prompt, "boxes": name in spec.box_tasks, "request": fields})
    limits = state.limits
    return {"model": state.model_name, "title": spec.title, "tasks": tasks,
            "limits": {"max_image_bytes": limits.max_bytes, "max_image_pixels": limits.max_pixels,
                       "max_request_bytes": limits.max_request_bytes, "max_model_len": state.max_model_len}}


def postprocess(spec, pipe, body):
    """{"text", "task", "boxes"} of an answer: the model's post-processing (what `infer` prints and the boxes
    `infer --json` gives, ModelSpec.postprocess) of `body["text"]` for the task named, or the task whose prompt
    `body["prompt"]` is, with boxes {"text", "box": [x1, y1, x2, y2], "points"?} in pixels of a width x height
    image."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    text, task, prompt = body.get("text"), body.get("task"), body.get("prompt")
    if not isinstance(text, str) or len(text) > MAX_ANSWER_CHARS:
        raise ApiError(400, f"text must be a string of at most {MAX_ANSWER_CHARS} characters", param="text")
    if task is not None and task not in spec.tasks:
        raise ApiError(400, f"unknown task {task!r}; this model's tasks: {', '.join(spec.tasks)}", param="task")
    if task is None and isinstance(prompt, str):
        task = pipe.task_inputs.task_of(prompt)
    size = [body.get("width"), body.get("height")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_SIDE for v in size):
        raise ApiError(400, f"width and height must be integers in 1..{MAX_SIDE}", param="width")
    extras = {}
    if pipe.postprocess is not None:
        text, extras = pipe.postprocess(text, task, [ImageSize(*size)], **pipe.postprocess_options)
    boxes = []
    for item in extras.get("boxes", []):
        box = {"text": item["text"], "box": [float(v) for v in item["box"]]}
        if item.get("poly") is not None:  # PaddleOCR-VL spotting: the quadrilateral the box bounds
            box["points"] = [[float(x), float(y)] for x, y in item["poly"]]
        boxes.append(box)
    return {"text": text, "task": task, "boxes": boxes}


def _int_query(request, name, default):
    value = request.query_params.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer", param=name) from None


def install(app, state):
    """Add the page's routes to the server's FastAPI app (create_app)."""
    files = static_files()
    pdf = PdfPages(state.limits)

    def spec():  # the served checkpoint version's ModelSpec (looked up per request: the app is made before, or
        # without, a model)
        return state.spec if state.spec is not None else models.get(state.pipe.name)

    async def body_of(request):
        return await read_body(request, state.limits.max_request_bytes, state.body_timeout)

    async def off_loop(fn, *args):  # the server's decode threads: pixel and parsing work never blocks the loop
        return await asyncio.get_running_loop().run_in_executor(state.decode_pool, fn, *args)

    def asset(name):
        if name not in files:
            raise ApiError(404, f"no page file {name!r}")
        data, kind = files[name]
        return Response(data, media_type=kind, headers=HEADERS)

    @app.get("/", include_in_schema=False)
    async def page():
        return asset("index.html")

    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str):
        return asset(name)

    @app.get("/v1/tasks")
    async def tasks():
        return task_list(spec(), state)

    @app.post("/v1/postprocess")
    async def answer(request: Request):
        body = decode_body(await body_of(request))
        return await off_loop(postprocess, spec(), state.pipe, body)

    @app.post("/v1/pages")
    async def pages(request: Request):
        data = await body_of(request)
        return {"pages": await off_loop(pdf.count, data)}

    @app.post("/v1/pages/render")
    async def render(request: Request):
        page_no, dpi = _int_query(request, "page", 1), _int_query(request, "dpi", DEFAULT_DPI)
        data = await body_of(request)
        png, _, _, count = await off_loop(pdf.render_png, data, page_no, dpi)
        return Response(png, media_type="image/png", headers={"X-Page-Count": str(count)})
