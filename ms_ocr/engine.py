"""The generation loop: continuous batching over a loaded VLMPipeline (`infer` as a batch of one, the offline batch
runner, the document pipeline, the server).

The KV cache holds `max_batch_size` sequence slots of one fixed length. Waiting requests fill free slots as
a group: their images go through the vision encoder together (packed rows), their prompts through prefill
together (right-padded, each written into its own slot's cache rows); then one compiled decode step advances
every running sequence per token. A sequence that stops frees its slot at once and the next request is admitted,
so short outputs never wait for long ones. With host-written caches (off Ascend) the running sequences are kept
in the lowest slots and a step computes only the rows that cover them (1, 2, 4 or 8), so a lone request decodes
as fast as one alone. Sampling is ms_ocr/generate.py's, output handling VLMPipeline.finish; a request's stop rules
(SamplingConfig.stop_rules, ms_ocr/stop_rules.py) see each of its tokens and may end it (finish_reason "stop", the
rule's name as the result's `stopped_by`).
"""

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from ms_ocr.generate import next_token
from ms_ocr.proc import available_bytes, rss_gb

ROW_BUCKETS = (1, 2, 4, 8)  # decode-step sizes (sequence rows) below max_batch_size; one graph each


@dataclass
class Request:
    """One unit of work: images (PIL) + prompt; `key` names it in results; `dump` keeps per-step logits; `prep`
    is the processor's output when the caller already ran it (e.g. to size the cache)."""
    key: str
    images: list
    prompt: str
    task: str = None
    sampling: object = None
    dump: bool = False
    prep: object = None
    # serving hooks, called/read in the engine's thread: on_token(token_id) sees each new token and returns
    # True to end the sequence there (finish_reason "stop", e.g. a stop string); a set `cancelled` Event drops
    # the request (waiting or running) at the next step and frees its slot
    on_token: object = None
    cancelled: object = None
    ignore_eos: bool = False  # run to the token budget (vLLM's ignore_eos; benchmarks)


class Cancelled(Exception):
    """A request dropped because its `cancelled` event was set (e.g. the client disconnected)."""


@dataclass
class _Sequence:
    request: Request
    prep: object
    slot: int
    max_new: int
    rng: object
    t_admit: float
    prompt: list = field(default_factory=list)  # prompt ids as ints (repetition-penalty history)
    generated: list = field(default_factory=list)
    logits: list = field(default_factory=list)
    t_first: float = None
    vision_ms: float = 0.0
    prefill_ms: float = 0.0
    decode_s: float = 0.0
    reported: bool = False  # on_result was called for it
    watches: list = field(default_factory=list)  # its sampling's stop rules, started (ms_ocr/stop_rules.py)
    stopped_by: str = None  # the name of the stop rule that ended it


class BatchEngine:
    def __init__(self, pipe, sampling, max_batch_size=4, max_input_length=4096, max_output_length=1024,
                 ignore_eos=False, max_model_len=None, pack_vision=True, text_after_vision=False):
        """`sampling` is the default SamplingConfig (a request may carry its own); the cache is sized for
        prompts up to max_input_length tokens plus max_output_length new tokens, or, with max_model_len (the
        server), for max_model_len tokens of prompt and output together (a sequence stops at that length).
        ignore_eos (benchmarks) runs every sequence to its token budget. pack_vision=False encodes each
        request's images on their own instead of packing a group's images into one row block: the vision
        graphs are then compiled per image size, not per group's total (what a server with pages of many sizes
        arriving in ever-different groups needs). text_after_vision (one request, VLMPipeline.run): a pipeline
        loaded in stages loads its text weights only once the first group's images are encoded, in place of the
        vision weights when the runtime releases its vision graphs (the peak memory of `infer`)."""
        if max_batch_size < 1:
            raise ValueError("max batch size must be at least 1")
        if max_input_length < 1 or max_output_length < 1:
            raise ValueError("max input/output length must be at least 1")
        rt = pipe.runtime
        self.text_after_vision = text_after_vision
        if not text_after_vision:
            pipe.ensure_text_weights()  # a pipeline loaded in stages (the CLI's) serves many requests here
        self.pipe, self.rt, self.sampling = pipe, rt, sampling
        self.batch = max_batch_size
        self.max_input = max_input_length
        self.max_output = max_output_length
        if max_model_len is None:
            self.slots = rt.plan_slots(max_input_length, max_output_length)  # raises past max_position_embeddings
            self.max_total = max_input_length + max_output_length
        else:
            self.slots = rt.plan_slots(max_model_len, 0)
            self.max_total = max_model_len
        need, free = rt.cache_bytes(self.batch, self.slots), available_bytes()
        if free is not None and need > 0.8 * free:
            raise ValueError(f"a KV cache for {self.batch} sequences of {self.slots} positions needs "
                             f"{need / 2 ** 30:.1f} GB and {free / 2 ** 30:.1f} GB are available: ask for fewer "
                             "sequences at once (--max-batch-size / --max-num-seqs) or shorter ones")
        self.pack_vision = pack_vision
        # Host-written caches (off Ascend): running sequences are kept in the first cache rows (a finished
        # sequence's row is refilled from the last one) and a step decodes only ROW_BUCKETS rows covering them,
        # not all max_batch_size rows; in-graph caches (Ascend) always step the whole batch.
        self.row_buckets = sorted({min(b, self.batch) for b in ROW_BUCKETS} | {self.batch}) \
            if rt.host_cache else [self.batch]
        self.eos = set() if ignore_eos else set(int(e) for e in pipe.eos_ids)
        self.compile_before = dict(rt.compiler.seconds)
        # decode steps run, their time (compile excluded) and the tokens they produced, over the engine's life
        self.decode_stats = {"steps": 0, "seconds": 0.0, "tokens": 0}
        # decode steps by the number of sequences they advanced, and by the cache rows they computed
        self.step_sizes, self.step_rows = {}, {}
        # resident memory (GB) after the last admitted group's vision, text-weight load (staged) and prefill
        self.rss = {}

    def warm_decode(self):
        """Compile the decode step of every row bucket (a server's --warmup) with one step over a zeroed cache,
        so the first time that many requests run together does not pay for it."""
        self.rt.reset_cache(self.batch, self.slots)
        for rows in self.row_buckets:
            zeros = np.zeros(rows, np.int32)
            self.rt.decode_batch(np.full(rows, self.rt.pad_id, np.int32), zeros, zeros, self.pipe.num_pos_axes)

    def compile_seconds(self):
        """Compile time spent since the engine was created, per graph family."""
        return {k: v - self.compile_before.get(k, 0.0) for k, v in self.rt.compiler.seconds.items()}

    def run(self, requests, on_result):
        """Process an iterable of Requests; on_result(request, result_or_None, error_or_None) is called as each
        finishes (in completion order). A request that fails to preprocess, or whose group fails in vision or
        prefill, is reported with its error and the run goes on."""
        pending = iter(requests)

        def take(n, wait):
            return list(itertools.islice(pending, n)) or None

        self.serve(take, on_result)

    def serve(self, take, on_result):
        """Run requests from a source until it closes and every admitted sequence has finished.

        take(n, wait) returns up to n new Requests, [] when none is ready, or None once the source is closed;
        `wait` is True when the engine is idle (the source may block for a while). Requests whose `cancelled`
        event is set are dropped with a Cancelled error, running ones at the next decode step. (A line reader's
        requests reach it already split into one request per line: ms_ocr/line_reader.py wraps the source.)"""
        self._cache_ready = False  # sized and zeroed at the first admission, after its vision (not resident then)
        active, closed = {}, False
        while True:
            self._drop_cancelled(active, on_result)
            free = [s for s in range(self.batch) if s not in active]
            group = []
            while free and not closed and len(group) < len(free):
                reqs = take(len(free) - len(group), not active and not group)
                if reqs is None:
                    closed = True
                    break
                if not reqs:
                    break
                for req in reqs:
                    try:
                        group.append((req, self._prepare(req)))
                    except Exception as e:  # noqa: BLE001 - recorded per input, the run goes on
                        on_result(req, None, e)
            if group:
                self._admit(group, free, active, on_result)
            if not active:
                if closed:
                    return
                continue
            self._step(active, on_result)

    def _drop_cancelled(self, active, on_result):
        for slot, seq in list(active.items()):
            if _is_cancelled(seq.request):
                del active[slot]
                on_result(seq.request, None, Cancelled(f"request {seq.request.key} was cancelled"))

    def _prepare(self, req):
        if _is_cancelled(req):
            raise Cancelled(f"request {req.key} was cancelled")
        (req.sampling or self.sampling).validate()
        prep = req.prep if req.prep is not None else self.pipe.prepare(req.images, req.prompt, req.task)[0]
        n = prep.input_ids.shape[0]
        if n > self.max_input:
            raise ValueError(f"prompt of {n} tokens exceeds --max-input-length {self.max_input}")
        return prep

    def _admit(self, group, free, active, on_result):
        t0 = time.perf_counter()
        c0 = dict(self.rt.compiler.seconds)
        try:
            inputs = [prep.vision_inputs for _, prep in group]
            if self.pack_vision:
                feats = self.rt.encode_batch(inputs)
            else:
                feats = [self.rt.encode_batch([v])[0] for v in inputs]
            t1 = time.perf_counter()
            self.rss["vision"] = rss_gb()
            if self.text_after_vision:  # staged: the text weights now (their time counts as load, not vision)
                self.text_after_vision = False
                self.pipe.ensure_text_weights(release_vision=self.rt.releases_vision)
                self.rss["text_load"] = rss_gb()
            if not self._cache_ready:
                self.rt.reset_cache(self.batch, self.slots)
                self._cache_ready = True
            t_text = time.perf_counter()
            c1 = dict(self.rt.compiler.seconds)
            slots = free[:len(group)]
            logits = self.rt.prefill_batch([prep for _, prep in group], feats, slots, self.slots).asnumpy()
            self.rss["prefill"] = rss_gb()
        except Exception as e:  # noqa: BLE001 - e.g. out of memory on a huge page: report the group, go on
            for req, _ in group:
                on_result(req, None, e)
            return
        t2 = time.perf_counter()
        c2 = self.rt.compiler.seconds
        vision_ms = 1000 * (t1 - t0 - (c1.get("vision", 0) - c0.get("vision", 0)))
        prefill_ms = 1000 * (t2 - t_text - (c2.get("prefill", 0) - c1.get("prefill", 0)))
        for (req, prep), slot, row in zip(group, slots, logits):
            try:
                cfg = req.sampling or self.sampling
                n_prompt = prep.input_ids.shape[0]
                max_new = min(cfg.max_new_tokens, self.max_output, self.max_total - n_prompt)
                seq = _Sequence(req, prep, slot, max_new, np.random.default_rng(cfg.seed), t0,
                                prompt=[int(t) for t in prep.input_ids], vision_ms=vision_ms, prefill_ms=prefill_ms,
                                watches=[(rule.name, rule.start(self.pipe.processor.tokenizer, self.pipe.eos_ids))
                                         for rule in cfg.stop_rules])
            except Exception as e:  # noqa: BLE001 - this request fails alone
                on_result(req, None, e)
                continue
            active[slot] = seq
            self._take(seq, row, on_result, active)

    def _take(self, seq, logits, on_result, active):
        """Choose seq's next token from its logits row; finish it if it stops. Anything that raises on the host
        for this sequence (sampling, the caller's on_token, post-processing) ends this request alone with its
        error: the other sequences and the loop go on."""
        try:
            self._take_token(seq, logits, on_result, active)
        except Exception as e:  # noqa: BLE001
            if seq.reported:  # raised by on_result itself (e.g. a full disk): the caller's to handle
                raise
            if active.get(seq.slot) is seq:
                del active[seq.slot]
            seq.reported = True
            on_result(seq.request, None, e)

    def _take_token(self, seq, logits, on_result, active):
        cfg = seq.request.sampling or self.sampling
        if seq.request.dump:
            seq.logits.append(np.array(logits, np.float32))
        tok = next_token(logits, seq.prompt + seq.generated, seq.generated, cfg, seq.rng)
        seq.generated.append(tok)
        if seq.t_first is None:
            seq.t_first = time.perf_counter()
        stop = tok in self.eos and not seq.request.ignore_eos
        if seq.request.on_token is not None and seq.request.on_token(tok):
            stop = True
        for name, watch in seq.watches:
            if watch(tok) and not stop:
                stop, seq.stopped_by = True, name
        if stop or len(seq.generated) >= seq.max_new:
            del active[seq.slot]
            self._finish(seq, "stop" if stop else "length", on_result)

    def _compact(self, active):
        """Move the sequences in the highest rows into free lower rows until they fill rows 0..n-1."""
        while max(active) >= len(active):
            src, dst = max(active), min(s for s in range(self.batch) if s not in active)
            self.rt.move_cache_row(src, dst)
            seq = active.pop(src)
            seq.slot = dst
            active[dst] = seq

    def _step(self, active, on_result):
        if len(self.row_buckets) > 1:
            self._compact(active)
        rows = next(b for b in self.row_buckets if b >= max(active) + 1)
        tokens = np.full(rows, self.rt.pad_id, np.int32)
        cache_pos = np.zeros(rows, np.int32)
        delta = np.zeros(rows, np.int32)
        for slot, seq in active.items():
            tokens[slot] = seq.generated[-1]
            cache_pos[slot] = seq.prep.input_ids.shape[0] + len(seq.generated) - 1
            delta[slot] = seq.prep.rope_delta
        t0 = time.perf_counter()
        c0 = self.rt.compiler.seconds.get("decode", 0.0)
        logits = self.rt.decode_batch(tokens, cache_pos, delta, self.pipe.num_pos_axes).asnumpy()
        dt = time.perf_counter() - t0 - (self.rt.compiler.seconds.get("decode", 0.0) - c0)
        self.decode_stats["steps"] += 1
        self.decode_stats["seconds"] += dt
        self.decode_stats["tokens"] += len(active)
        self.step_sizes[len(active)] = self.step_sizes.get(len(active), 0) + 1
        self.step_rows[rows] = self.step_rows.get(rows, 0) + 1
        for slot, seq in list(active.items()):
            seq.decode_s += dt
            self._take(seq, logits[slot], on_result, active)

    def _finish(self, seq, reason, on_result):
        now = time.perf_counter()
        n_dec = len(seq.generated) - 1
        result = self.pipe.finish(seq.generated, reason, seq.request.task, seq.request.images)
        result["timings"] = {
            "latency_ms": 1000 * (now - seq.t_admit),
            "first_token_ms": 1000 * (seq.t_first - seq.t_admit),
            "vision_ms": seq.vision_ms,
            "prefill_ms": seq.prefill_ms,
            "decode_tokens": n_dec,
            "decode_tokens_per_s": n_dec / seq.decode_s if n_dec and seq.decode_s > 0 else 0.0,
            "prompt_tokens": int(seq.prep.input_ids.shape[0]),
        }
        if seq.stopped_by is not None:
            result["stopped_by"] = seq.stopped_by
        if seq.request.dump:
            result["dump"] = {"logits": np.stack(seq.logits), "token_ids": np.asarray(seq.generated, np.int64)}
        seq.reported = True  # an error raised by on_result itself is the caller's (e.g. a full disk): not retried
        on_result(seq.request, result, None)


def _is_cancelled(req):
    return req.cancelled is not None and req.cancelled.is_set()
