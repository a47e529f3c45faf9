"""Server metrics in Prometheus' text format (the names follow vLLM's, under an `ms_ocr:` prefix)."""

import bisect
import threading

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
TOKEN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
LATENCY_BUCKETS = (0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0, 1200.0)


class Histogram:
    def __init__(self, bounds):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value):
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def lines(self, name, labels=""):
        out, total = [], 0
        for bound, count in zip(self.bounds + (float("inf"),), self.counts):
            total += count
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            out.append(f'{name}_bucket{{{labels}{"," if labels else ""}le="{le}"}} {total}')
        suffix = f"{{{labels}}}" if labels else ""
        out += [f"{name}_sum{suffix} {self.sum}", f"{name}_count{suffix} {total}"]
        return out


class Metrics:
    """Counters and histograms updated from the engine thread and the request handlers (one lock)."""

    def __init__(self, model_name):
        self.model = model_name
        self.lock = threading.Lock()
        self.requests = {}          # (status code, finish reason or "") -> count
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.per_token = Histogram(TOKEN_BUCKETS)
        self.e2e = Histogram(LATENCY_BUCKETS)

    def count_request(self, status, finish=""):
        with self.lock:
            self.requests[(status, finish)] = self.requests.get((status, finish), 0) + 1

    def first_token(self, seconds, prompt_tokens):
        with self.lock:
            self.ttft.observe(seconds)
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += 1

    def next_token(self, seconds):
        with self.lock:
            self.per_token.observe(seconds)
            self.generation_tokens += 1

    def finished(self, seconds):
        with self.lock:
            self.e2e.observe(seconds)

    def render(self, running, waiting, step_sizes, max_num_seqs, compile_seconds=None, step_rows=None):
        """The exposition text; gauges, decode-step sizes (sequences advanced, cache rows computed) and compile
        seconds come from the worker at scrape time."""
        lab = f'model_name="{self.model}"'
        with self.lock:
            lines = [
                "# HELP ms_ocr:num_requests_running Sequences in the decode batch.",
                "# TYPE ms_ocr:num_requests_running gauge", f"ms_ocr:num_requests_running{{{lab}}} {running}",
                "# HELP ms_ocr:num_requests_waiting Accepted requests not yet decoding (images, queue, prefill).",
                "# TYPE ms_ocr:num_requests_waiting gauge", f"ms_ocr:num_requests_waiting{{{lab}}} {waiting}",
                "# HELP ms_ocr:max_num_seqs Sequence slots of the decode batch (--max-num-seqs).",
                "# TYPE ms_ocr:max_num_seqs gauge", f"ms_ocr:max_num_seqs{{{lab}}} {max_num_seqs}",
                "# HELP ms_ocr:request_total Finished chat completion requests by HTTP status and finish reason.",
                "# TYPE ms_ocr:request_total counter"]
            for (status, finish), n in sorted(self.requests.items()):
                lines.append(f'ms_ocr:request_total{{{lab},status="{status}",finished_reason="{finish}"}} {n}')
            lines += ["# HELP ms_ocr:prompt_tokens_total Prompt tokens of admitted requests.",
                      "# TYPE ms_ocr:prompt_tokens_total counter", f"ms_ocr:prompt_tokens_total{{{lab}}} {self.prompt_tokens}",
                      "# HELP ms_ocr:generation_tokens_total Generated tokens.",
                      "# TYPE ms_ocr:generation_tokens_total counter",
                      f"ms_ocr:generation_tokens_total{{{lab}}} {self.generation_tokens}",
                      "# HELP ms_ocr:time_to_first_token_seconds From arrival to the first generated token.",
                      "# TYPE ms_ocr:time_to_first_token_seconds histogram",
                      *self.ttft.lines("ms_ocr:time_to_first_token_seconds", lab),
                      "# HELP ms_ocr:time_per_output_token_seconds Time between consecutive tokens of a request.",
                      "# TYPE ms_ocr:time_per_output_token_seconds histogram",
                      *self.per_token.lines("ms_ocr:time_per_output_token_seconds", lab),
                      "# HELP ms_ocr:e2e_request_latency_seconds From arrival to the last token.",
                      "# TYPE ms_ocr:e2e_request_latency_seconds histogram",
                      *self.e2e.lines("ms_ocr:e2e_request_latency_seconds", lab)]
        lines += ["# HELP ms_ocr:decode_steps_total Decode steps by the number of sequences they advanced together.",
                  "# TYPE ms_ocr:decode_steps_total counter"]
        for n, steps in sorted(step_sizes.items()):
            lines.append(f'ms_ocr:decode_steps_total{{{lab},running="{n}"}} {steps}')
        lines += ["# HELP ms_ocr:decode_step_rows_total Decode steps by the cache rows they computed (the running "
                  "sequences rounded up to 1, 2, 4, 8 or --max-num-seqs).", "# TYPE ms_ocr:decode_step_rows_total counter"]
        for n, steps in sorted((step_rows or {}).items()):
            lines.append(f'ms_ocr:decode_step_rows_total{{{lab},rows="{n}"}} {steps}')
        lines += ["# HELP ms_ocr:compile_seconds_total Graph compile time (each new image size or prompt bucket "
                  "compiles once; the engine waits meanwhile).", "# TYPE ms_ocr:compile_seconds_total counter"]
        for graph, seconds in sorted((compile_seconds or {}).items()):
            lines.append(f'ms_ocr:compile_seconds_total{{{lab},graph="{graph}"}} {seconds}')
        return "\n".join(lines) + "\n"
