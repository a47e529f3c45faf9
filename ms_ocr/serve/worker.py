"""The engine thread: one thread owns the MindSpore runtime and runs the continuous-batching engine
(ms_ocr/engine.py) over requests the asyncio handlers hand it through a queue; tokens and results go back to
each request's asyncio queue with call_soon_threadsafe, so the event loop never waits on a graph."""

import queue
import sys
import threading
import time

from ms_ocr import line_reader
from ms_ocr.engine import Cancelled
from ms_ocr.errors import user_error_message


# Faults of the engine loop itself (not of one request) survived: more than MAX_FAULTS within FAULT_WINDOW seconds and
# the loop stops, /health says 503 (a restart that fails again at once would spin)
MAX_FAULTS = 5
FAULT_WINDOW = 10.0


class ShuttingDown(Cancelled):
    """A request ended because the server is stopping (SIGTERM / Ctrl-C): answered 503, a stream's error chunk."""


class Job:
    """One chat request in flight: its engine Request, text stream, timing and the asyncio queue of events
    ("delta", text) / ("done", finish_reason) / ("error", exception)."""

    def __init__(self, key, prep, sampling, stream, loop, events, metrics, arrival, ignore_eos=False,
                 postprocess=True, lines=None, task=None):
        """`prep`: the request's Prepared; a line reader's request has `lines` instead (line_reader.LineRequest);
        `task`: the model's task the request's prompt is (its answer's post-processing), or None."""
        self.key, self.prep, self.stream, self.loop, self.events = key, prep, stream, loop, events
        self.n_prompt = sum(int(p.input_ids.shape[0]) for p in line_reader.prepared(prep, lines))  # every line's
        self.metrics, self.arrival = metrics, arrival
        self.cancelled = threading.Event()
        extra = {} if lines is None else {"on_line_break": self._add}
        self.request = line_reader.request(key, [], "", prep=prep, lines=lines, sampling=sampling, task=task,
                                           on_token=self.on_token, cancelled=self.cancelled, ignore_eos=ignore_eos,
                                           **extra)
        self.n_tokens, self.t_last, self.finish_reason = 0, None, None  # n_tokens: set with the result
        self.taken = False  # the engine has taken it from the inbox
        self.postprocess, self.text = postprocess, None

    def _post(self, *event):
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the event loop has closed (server shutting down): nobody is listening
            pass

    def on_token(self, token):  # engine thread
        now = time.perf_counter()
        if self.t_last is None:
            self.metrics.first_token(now - self.arrival, self.n_prompt)
        else:
            self.metrics.next_token(now - self.t_last)
        self.t_last = now
        return self._add(token)

    def _add(self, token):  # engine thread: a token of the text (generated, or a line break between two lines)
        stop = self.stream.add(token)
        delta = self.stream.pending()
        if delta:
            self._post("delta", delta)
        return stop

    def on_result(self, result, error):  # engine thread
        if error is not None:
            self._post("error", error)
            return
        self.metrics.finished(time.perf_counter() - self.arrival)
        self.finish_reason = result["finish_reason"]
        self.n_tokens = len(result["token_ids"])  # what the model generated (a line reader's stream also had "\n"s)
        # the whole answer as `infer` prints it: the model's post-processing (e.g. HunyuanOCR's repeat clean-up),
        # computed once by the engine; raw with skip_postprocess or skip_special_tokens false, and the raw text cut
        # at a stop string
        cooked = self.postprocess and self.stream.skip and not self.stream.stopped
        self.text = result["text"] if cooked else self.stream.final_text()
        delta = self.stream.pending(final=True)
        if delta:
            self._post("delta", delta)
        self._post("done", result["finish_reason"])


class EngineWorker:
    """Owns the BatchEngine's thread. Admission is bounded: at most max_num_seqs decoding plus max_queue
    accepted-but-waiting requests (reserve() says no beyond that, the caller answers 503)."""

    def __init__(self, engine, max_queue, warmup=None):
        self.engine, self.max_queue = engine, max_queue
        self.capacity = engine.batch + max_queue
        self.inbox = queue.Queue()
        self.lock = threading.Lock()
        self.outstanding = 0        # reserved (accepted) requests not finished
        self.running = 0            # requests holding a decode slot
        self.closing = False
        self.jobs = {}              # key -> Job, submitted and not finished
        self.ready = threading.Event()
        self.failed = None
        self.dead = False           # the engine thread ended by something other than a clean stop
        self.restarts = 0           # engine loop faults survived
        self.warmup = warmup        # a Request run before serving (compiles the decode graph)
        self.thread = threading.Thread(target=self._main, name="ms_ocr-engine", daemon=True)

    def start(self):
        self.thread.start()
        self.ready.wait()
        if self.failed is not None:
            raise self.failed

    def reserve(self):
        with self.lock:
            if self.closing or self.outstanding >= self.capacity:
                return False
            self.outstanding += 1
            return True

    def release(self):
        with self.lock:
            self.outstanding -= 1

    def submit(self, job):
        with self.lock:
            self.jobs[job.key] = job
        self.inbox.put(job)

    def counts(self):
        """(running, waiting) for the metrics."""
        with self.lock:
            return self.running, self.outstanding - self.running

    def shutdown(self):
        """The server is stopping: refuse new requests and answer every request in flight now (a JSON 503, or a
        stream's error chunk and [DONE]) instead of letting the HTTP server cut them when its grace period ends;
        the engine drops their sequences at its next step."""
        self.closing = True
        with self.lock:
            jobs = list(self.jobs.values())
            self.jobs.clear()
        for job in jobs:
            job.cancelled.set()
            job.on_result(None, ShuttingDown("the server is shutting down"))

    def stop(self, timeout=30):
        """Cancel what is queued or running and end the engine thread."""
        self.closing = True
        with self.lock:
            for job in self.jobs.values():
                job.cancelled.set()
        self.thread.join(timeout)

    # ---- engine thread ---------------------------------------------------------------------------
    def _main(self):
        try:
            if self.warmup is not None:
                errors = []
                line_reader.run(self.engine, [self.warmup], lambda req, res, err: errors.append(err))
                if errors and errors[0] is not None:
                    raise errors[0]
                self.engine.warm_decode()
        except Exception as e:  # noqa: BLE001 - reported by start() in the main thread
            self.failed = e
            self.ready.set()
            return
        self.ready.set()
        faults = []
        while True:
            try:
                line_reader.serve(self.engine, self._take, self._on_result)
                return
            except Exception as e:  # noqa: BLE001 - a fault of the loop itself: fail what it held, serve on
                self.restarts += 1
                now = time.monotonic()
                faults = [t for t in faults if now - t < FAULT_WINDOW] + [now]
                self._fail_taken(e)
                if len(faults) > MAX_FAULTS:  # a loop that fails as it starts would spin and fill the log
                    print(f"ms_ocr: engine loop failed {len(faults)} times within {FAULT_WINDOW:g} s; stopped "
                          f"({user_error_message(e)})", file=sys.stderr, flush=True)
                    self.dead = True
                    self.closing = True
                    for job in self._drain():
                        self._on_result(job.request, None, e)
                    return
                print(f"ms_ocr: engine loop error, restarted ({user_error_message(e)})", file=sys.stderr, flush=True)
            except BaseException:
                self.dead = True
                raise

    def alive(self):
        """True while the engine thread runs its loop (what /health reports)."""
        return self.ready.is_set() and self.failed is None and not self.dead and self.thread.is_alive()

    def _fail_taken(self, error):
        """Every request the engine had taken and not answered gets `error` (the loop starts afresh)."""
        with self.lock:
            taken = [job for job in self.jobs.values() if job.taken]
        for job in taken:
            self._on_result(job.request, None, error)

    def _take(self, n, wait):
        if self.closing:
            for job in self._drain():
                with self.lock:
                    self.running += 1
                self._on_result(job.request, None, ShuttingDown("the server is shutting down"))
            return None
        jobs = []
        try:
            jobs.append(self.inbox.get(timeout=0.1) if wait else self.inbox.get_nowait())
            while len(jobs) < n:
                jobs.append(self.inbox.get_nowait())
        except queue.Empty:
            pass
        with self.lock:
            self.running += len(jobs)  # they take slots now (prefill is part of the decode batch's admission)
            for job in jobs:
                job.taken = True
        return [job.request for job in jobs]

    def _drain(self):
        jobs = []
        while True:
            try:
                jobs.append(self.inbox.get_nowait())
            except queue.Empty:
                return jobs

    def _on_result(self, request, result, error):
        with self.lock:
            job = self.jobs.pop(request.key, None)
            if job is None:  # answered already
                return
            self.running -= 1
        job.on_result(result, error)
