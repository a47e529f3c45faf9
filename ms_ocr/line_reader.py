"""The demo model's line reader around the engine: a request for a crop of text becomes one request per text line,
and the lines' answers one answer (ms_ocr/processing/text_lines.py finds the lines; VLMPipeline.line_height says a
checkpoint reads lines). An adapter of the engine's request source, as STYLE.md draws it: BatchEngine knows nothing
of lines; `serve` and `run` here wrap a caller's source when its pipeline reads lines, and pass it through unchanged
otherwise."""

import dataclasses
from dataclasses import dataclass
import functools
import itertools

import numpy as np

from ms_ocr.engine import Request


@dataclass
class LineRequest(Request):
    """A Request whose one image's text lines the caller has found and prepared (VLMPipeline.prepare_request)."""
    lines: list = None  # [(line ImageSize, Prepared)], each read as a request of its own
    # on_line_break(token_id): the tokenizer's "\n" ids between two lines, returning True to end the answer as
    # on_token does; None: they go to on_token (they are not generated tokens: the server's token metrics leave them
    # out)
    on_line_break: object = None


def request(key, images, prompt, prep=None, lines=None, **fields):
    """A Request, or a LineRequest when `lines` were prepared (VLMPipeline.prepare_request's (prep, lines))."""
    if lines is None:
        return Request(key, images, prompt, prep=prep, **fields)
    return LineRequest(key, images, prompt, prep=prep, lines=lines, **fields)


def prepared(prep, lines):
    """The Prepared of each sequence a request becomes: [prep], or each line's for a line reader (Request.lines)."""
    return [prep] if lines is None else [p for _, p in lines]




def joined_lines(outs, stopped=False, reason=None):
    """One answer from the answers of a crop's lines, in order: texts joined by "\n", the generated token ids one
    line's after the other (each a dump's step), finish reason `reason` when given, else "length" where a line ran
    out of tokens ("stop" when `stopped`: the caller's on_token ended the answer), a dump's steps concatenated, the
    timings summed (latency and first token: the last line's and the first's)."""
    out = dict(outs[-1])
    out["text"] = "\n".join(o["text"] for o in outs)
    out["token_ids"] = [t for o in outs for t in o["token_ids"]]
    out["finish_reason"] = reason or ("stop" if stopped else
                                      "length" if any(o["finish_reason"] == "length" for o in outs)
                                      else outs[-1]["finish_reason"])
    if all("dump" in o for o in outs):
        out["dump"] = {key: np.concatenate([o["dump"][key] for o in outs]) for key in ("logits", "token_ids")}
    timings = dict(out["timings"])
    for key in ("vision_ms", "prefill_ms", "decode_tokens", "prompt_tokens"):
        timings[key] = sum(o["timings"][key] for o in outs)
    decode_s = sum(o["timings"]["decode_tokens"] / o["timings"]["decode_tokens_per_s"] for o in outs
                   if o["timings"]["decode_tokens_per_s"])
    timings["decode_tokens_per_s"] = timings["decode_tokens"] / decode_s if decode_s else 0.0
    timings["first_token_ms"] = outs[0]["timings"]["first_token_ms"]
    timings["lines"] = len(outs)
    out["timings"] = timings
    return out


class _Crop:
    """A request read line by line: its line requests' results, the order their tokens reach the caller, and its
    token budget (the request's max_new_tokens, spent by the lines' tokens in reading order)."""

    def __init__(self, request, count, budget):
        self.request, self.results, self.error = request, [None] * count, None
        self.live, self.held, self.finished, self.stopped = 0, [[] for _ in range(count)], set(), False
        self.budget, self.used, self.cut = budget, 0, False  # cut: the budget ended the answer
        self.kept = [0] * count  # tokens of each line that reached the reader within the budget
        self.subs = [None] * count


class LineReader:
    """A line reader's requests (VLMPipeline.line_height: the demo model) as one request per text line, around
    BatchEngine.serve's request source: `take` and `report` wrap the caller's take(n, wait) and
    on_result(request, result, error).

    A LineRequest with `lines` (the caller found and prepared them: VLMPipeline.prepare_request), or a request with
    one image and
    nothing prepared when `height` is set (its lines are found here, processing/text_lines.py), becomes requests
    "<key>#line<i>" that run like any other (in one batch, a crop's lines decode together). The caller's
    on_result sees the original request once every line has finished, with the answers joined (joined_lines) or the
    first line's error. Its on_token sees the lines' tokens in reading order and `line_break` (the tokenizer's ids
    of "\n") between two lines, so a stream of them reads as the joined text: the tokens of a line wait until the
    lines above it have finished. When on_token ends the answer (a stop string) the lines not yet read stop at
    their first token.

    The request's token budget (its sampling's max_new_tokens, else `budget`) is the whole answer's, as for any
    other request: the lines' tokens spend it in reading order, and once it is spent the answer ends there
    (finish reason "length"): the lines below stop at their next token, a line's tokens past the budget are left
    out (its text decoded again by `finish(token_ids, reason, task, images)`: VLMPipeline.finish), and a line
    whose waiting tokens already fill what is left stops generating. So a page of a thousand lines costs at most
    its budget of tokens plus the lines decoding at once, not a budget per line. Other requests pass through."""

    def __init__(self, take, on_result, height=None, line_break=(), finish=None, budget=None):
        from collections import deque
        self._take, self._on_result, self.height, self.line_break = take, on_result, height, tuple(line_break)
        self.finish, self.budget = finish, budget
        self.buffer, self.crops = deque(), {}  # id(line request) -> (_Crop, line index, line request)

    def take(self, n, wait):
        if not self.buffer:
            got = self._take(n, wait)
            if got is None:
                return None
            for req in got:
                self.buffer.extend(self.split(req))
        return [self.buffer.popleft() for _ in range(min(n, len(self.buffer)))]

    def split(self, req):
        import dataclasses
        lines = req.lines if isinstance(req, LineRequest) else None
        if lines is None and self.height and len(req.images) == 1 and req.prep is None:
            from ms_ocr.processing.text_lines import line_images
            lines = [(img, None) for img in line_images(req.images[0], self.height)]
        if lines is None:
            return [req]
        budget = req.sampling.max_new_tokens if req.sampling is not None else self.budget
        crop = _Crop(req, len(lines), float("inf") if budget is None or self.finish is None else budget)
        for i, (img, prep) in enumerate(lines):
            sub = Request(**{f.name: getattr(req, f.name) for f in dataclasses.fields(Request)})
            sub.key, sub.images, sub.prep = f"{req.key}#line{i}", [img], prep
            sub.on_token = functools.partial(self._token, crop, i)
            self.crops[id(sub)] = (crop, i, sub)  # the line request itself kept alive: its id stays unique
            crop.subs[i] = sub
        return list(crop.subs)

    def _token(self, crop, i, token):
        if crop.stopped:
            return True
        if i != crop.live:
            crop.held[i].append(token)
            return len(crop.held[i]) >= crop.budget - crop.used  # what it holds already fills what is left
        return self._release(crop, token)

    def _release(self, crop, token):
        """One token of the live line reaches the caller (in reading order), within the budget."""
        crop.used += 1
        crop.kept[crop.live] += 1
        on_token = crop.request.on_token
        if on_token is not None and on_token(token):
            crop.stopped = True
        elif crop.used >= crop.budget:
            crop.stopped = crop.cut = True
        return crop.stopped

    def _advance(self, crop):
        """The next lines' turn to reach on_token, once the lines above them have finished."""
        while crop.live in crop.finished and crop.live + 1 < len(crop.results) and not crop.stopped:
            crop.live += 1
            req = crop.request
            brk = (req.on_line_break if isinstance(req, LineRequest) else None) or req.on_token
            crop.stopped = brk is not None and any(brk(t) for t in self.line_break)
            held, crop.held[crop.live] = crop.held[crop.live], []
            for token in held:
                if crop.stopped or self._release(crop, token):
                    break

    def _within_budget(self, crop):
        """The lines' results as the reader saw them: a line cut by the budget decoded again from the tokens it
        kept, the lines after the cut left out."""
        outs = []
        for i, out in enumerate(crop.results):
            if crop.cut and i > crop.live:
                break
            kept = crop.kept[i]
            if kept < len(out["token_ids"]):
                sub = crop.subs[i]
                short = self.finish(out["token_ids"][:kept], "length", sub.task, sub.images)
                short["timings"] = out["timings"]
                if "dump" in out:
                    short["dump"] = {k: v[:kept] for k, v in out["dump"].items()}
                out = short
            outs.append(out)
        return outs

    def report(self, req, result, error):
        entry = self.crops.pop(id(req), None)
        if entry is None:
            return self._on_result(req, result, error)
        crop, i, _ = entry
        crop.results[i], crop.error = result, crop.error or error
        crop.finished.add(i)
        if crop.error is None:
            self._advance(crop)
        if len(crop.finished) == len(crop.results):  # every line has been reported
            joined = None
            if crop.error is None:
                outs = self._within_budget(crop) if crop.budget != float("inf") else crop.results
                joined = joined_lines(outs, crop.stopped, "length" if crop.cut else None)
            self._on_result(crop.request, joined, crop.error)


def adapt(pipe, take, on_result, budget):
    """(take, on_result) of a request source for BatchEngine.serve: wrapped in a LineReader when `pipe` reads lines
    (its line_height), as they are otherwise. `budget`: the token budget of a request without its own sampling."""
    if not pipe.line_height:
        return take, on_result
    reader = LineReader(take, on_result, pipe.line_height, pipe.line_break_ids, finish=pipe.finish, budget=budget)
    return reader.take, reader.report


def serve(engine, take, on_result):
    """BatchEngine.serve over a source a line reader's requests may come from."""
    pipe = engine.pipe
    engine.serve(*adapt(pipe, take, on_result, engine.sampling.max_new_tokens if pipe.line_height else None))


def run(engine, requests, on_result):
    """BatchEngine.run over an iterable a line reader's requests may be among."""
    pending = iter(requests)

    def take(n, wait):
        return list(itertools.islice(pending, n)) or None

    serve(engine, take, on_result)
