"""What every command line shares (infer, batch, pipeline, serve): one-line errors and exit codes, the parser that
checks the shared options' ranges, the shared options (sampling, --mode from the model specs), prompts from tasks,
and Ctrl-C / SIGTERM handling."""

import argparse
import contextlib
import os
import signal
import sys
import threading

from ms_ocr import models


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


MAX_DPI = 600  # PDF pages: past this the models' own pixel limits resize the page down again; each DPI step
# up costs memory per page in flight

MAX_BATCH = 256  # sequences decoded together (--max-batch-size, --max-num-seqs): each is a KV cache row and a page
# in flight; the engine also refuses a cache larger than the memory there is

# bounds every entry point's shared options obey: (flag, test, what it must be)
_BOUNDS = (
    ("max_batch_size", lambda v: 1 <= v <= MAX_BATCH, f"in 1..{MAX_BATCH}"),
    ("max_num_seqs", lambda v: 1 <= v <= MAX_BATCH, f"in 1..{MAX_BATCH}"),
    ("threads", lambda v: v >= 1, "at least 1"),
    ("seed", lambda v: 0 <= v < 2 ** 64, "in 0..2**64-1"),
    ("temperature", lambda v: 0 <= v < float("inf"), "a finite number >= 0"),
    ("top_p", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("top_k", lambda v: v >= 0, ">= 0 (0: off)"),
    ("repetition_penalty", lambda v: 0 < v < float("inf"), "a finite number > 0"),
    ("no_repeat_ngram", lambda v: v >= 0, ">= 0 (0: off)"),
    ("dpi", lambda v: 10 <= v <= MAX_DPI, f"in 10..{MAX_DPI}"),
    ("max_pixels", lambda v: v >= 1, "at least 1"),
    ("clean_up_from", lambda v: v >= 0, ">= 0 (0: off)"),
)


class Parser(argparse.ArgumentParser):
    """argparse whose errors are CliErrors (one line, exit 2), and which checks the shared options' ranges,
    naming the flag (`--seed -1` reached numpy and failed there)."""

    def error(self, message):
        raise CliError(message)

    def parse_args(self, args=None, namespace=None):
        parsed = super().parse_args(args, namespace)
        for name, ok, must in _BOUNDS:
            value = getattr(parsed, name, None)
            if value is not None and not ok(value):
                raise CliError(f"--{name.replace('_', '-')} must be {must}, not {value}")
        threads = getattr(parsed, "threads", None)
        if threads is not None and threads > usable_cores():
            # more threads than cores only makes them wait for each other
            print(f"note: --threads {threads} is more than the {usable_cores()} cores this process may use; "
                  f"using {usable_cores()}", file=sys.stderr)
            parsed.threads = usable_cores()
        return parsed


def usable_cores():
    """The cores this process may run on (its CPU affinity: a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def model_spec(args):
    """The ModelSpec of --model, with --mode checked against it; CliError if either is wrong."""
    try:
        spec = models.get(args.model)
        models.check_mode(spec, getattr(args, "mode", None))
    except ValueError as e:
        raise CliError(str(e)) from None
    return spec


def add_device_args(p):
    """--dtype, --quantize, --kv-cache-dtype, --device, --threads: where and in which precision the model runs."""
    from ms_ocr.plan import DTYPES, KV_CACHE_DTYPES, QUANTIZE
    p.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="auto follows the checkpoint, exactly: on the CPU a bf16 checkpoint's weights stay bf16 in "
                        "memory with fp32 compute; fp32 widens them at load; bf16 on a CPU with bf16 dot products "
                        "(AVX512_BF16, AMX, Arm BF16) computes the products of vision and prompt in bf16, with a "
                        "bf16 KV cache")
    p.add_argument("--quantize", default="none", choices=QUANTIZE,
                   help="int8: the decoder's dense layers, a MoE decoder's routed experts and the head (a tied "
                        "one: the embedding table) in weight-only int8 with a scale per row, made at load (decode "
                        "reads half the bytes of bf16; CPU only); int8-g64 / int8-g32: a scale per 64 / 32 columns "
                        "of a row")
    p.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES,
                   help="the decoder's KV cache: auto is bf16 where --dtype bf16 computes in bf16 and under "
                        "--quantize int8 (where the native decode layer reads it), fp32 (exact) otherwise; bf16 "
                        "halves the bytes decode reads per cached position and the cache's memory (keys and values "
                        "rounded to bf16 as they are stored)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "ascend"])
    p.add_argument("--threads", type=int, default=None, help="CPU runtime threads")


def add_mode_arg(p):
    p.add_argument("--mode", choices=models.modes(), help=models.modes_help())


def add_sampling_args(p):
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--repetition-penalty", type=float, default=None,
                   help="default: the model's, as its reference client decodes (hunyuan-ocr 1.5: 1.08; otherwise 1 "
                        "= off)")
    p.add_argument("--no-repeat-ngram", type=int, default=None,
                   help="ban repeating n-grams of this size (0 = off; default: the model's, e.g. deepseek-ocr 30 "
                        "within 90 tokens)")
    p.add_argument("--no-early-stop", action="store_true",
                   help="turn off the model's stop rules (hunyuan-ocr 1.5: generation ends once the answer's last "
                        "characters repeat one unit 8 times, checked from 4,000 characters on, every 1,000, as "
                        "Tencent's clients stop)")
    p.add_argument("--seed", type=int, default=None)


def sampling_config(args, spec, pipe):
    """generate.model_sampling from the shared sampling options (`spec`: the checkpoint version's); CliError if
    invalid."""
    from ms_ocr.generate import model_sampling
    try:
        return model_sampling(spec, pipe.processor.tokenizer, args.max_new_tokens, args.temperature, args.top_p,
                              args.top_k, args.repetition_penalty, args.no_repeat_ngram, args.seed,
                              early_stop=not args.no_early_stop)
    except ValueError as e:
        raise CliError(str(e)) from None


# post-processing options of the models (ModelSpec.postprocess_options) a flag sets: flag -> (key, value of args)
OUTPUT_OPTIONS = {"--clean-up-from": ("clean_up_from", lambda args: args.clean_up_from),
                  "--no-doc-postprocess": ("normalize_doc_parse", lambda args: False if args.no_doc_postprocess
                                           else None)}


def add_output_args(p):
    """--max-pixels and the flags that change a model's post-processing (OUTPUT_OPTIONS)."""
    p.add_argument("--max-pixels", type=int, default=None,
                   help="resize each image to at most this many pixels (models with a pixel budget: paddleocr-vl, "
                        "hunyuan-ocr; default: the checkpoint's max_pixels, e.g. HunyuanOCR 1.0's 4,194,304; "
                        "HunyuanOCR-1.5 pages up to ~4096x4096 cost minutes of vision on a CPU: its README)")
    p.add_argument("--clean-up-from", type=int, default=None, metavar="CHARS",
                   help="cut a repeated tail from answers of at least CHARS characters (0 = off; default: the "
                        "model's: hunyuan-ocr 1.0 8,000, 1.5 2,000)")
    p.add_argument("--no-doc-postprocess", action="store_true",
                   help="hunyuan-ocr 1.5: leave doc_parse answers as the model wrote them (default: Tencent's "
                        "markdown normalisation, layout coordinates stripped)")


def load_pipeline(args, spec, model_dir, staged=False):
    """The device set up for the command line's --device / --threads, `spec`'s model loaded from `model_dir` in its
    precision (--dtype, --quantize, --kv-cache-dtype), --mode and the output flags applied. `staged`: the vision
    weights released before the text weights load (one request: a lower peak). Returns (device target, pipeline)."""
    import contextlib

    from ms_ocr.device import setup
    from ms_ocr.models.loading import staged_weights
    target = setup(args.device, args.threads)
    with staged_weights() if staged else contextlib.nullcontext():
        pipe = spec.load(model_dir, target, args.dtype, quantize=args.quantize, kv_cache_dtype=args.kv_cache_dtype)
    if args.mode:
        pipe.processor.set_mode(args.mode)
    apply_output_args(args, spec, pipe)
    return target, pipe


def apply_output_args(args, spec, pipe):
    """The output flags on a loaded pipeline of `spec` (the checkpoint version's); CliError where one does not
    apply to the model."""
    from ms_ocr.vlm import cap_pixels
    if args.max_pixels is not None:
        try:
            cap_pixels(pipe, args.max_pixels)
        except ValueError as e:
            raise CliError(str(e)) from None
    for flag, (key, value) in OUTPUT_OPTIONS.items():
        if value(args) is None:
            continue
        if key not in (spec.postprocess_options or {}):
            owners = ", ".join(f"{v.name} {name}" if name else v.name for s in models.specs()
                               for name, v in s.all_versions() if key in (v.postprocess_options or {}))
            version = f" {spec.version}" if spec.version else ""
            raise CliError(f"{flag} applies to {owners}, not {spec.name}{version}")
        pipe.postprocess_options[key] = value(args)


def print_notes(name, result, out=None):
    """One stderr line per note of a result: the model's (e.g. a spotting_json answer that did not parse whole)
    and a stop rule that ended the answer."""
    out = out or sys.stderr
    for note in result.get("notes", ()):
        print(f"note: {name}: {note}", file=out)
    if "stopped_by" in result:
        print(f"note: {name}: generation stopped early ({result['stopped_by']}: the answer kept repeating its last "
              "characters); --no-early-stop turns this off", file=out)


def resolve_prompt(args, task_prompts, model):
    """(prompt text, task name or None for a free prompt)."""
    if args.prompt is not None:
        if not args.prompt.strip():
            raise CliError("--prompt is empty")
        return args.prompt, None
    task = args.task or next(iter(task_prompts))
    if task not in task_prompts:
        raise CliError(f"unknown task {task!r} for {model}; choose one of: {', '.join(task_prompts)}")
    return task_prompts[task], task


@contextlib.contextmanager
def exit_on_interrupt(message):
    """Within the block, Ctrl-C (SIGINT) and SIGTERM end the process at once: `message()` on one line on stderr,
    exit status 130.

    Why not Python's KeyboardInterrupt: MindSpore's runtime replaces the SIGINT handler while graphs run with
    one that sends the process SIGTERM (which killed it without a word), and a KeyboardInterrupt raised inside
    `import mindspore` aborts the interpreter ("Fatal Python error") or, inside a graph compile, prints
    MindSpore's compile log. Whatever has finished is already on disk (batch records are fsynced one by one,
    pipeline files replaced atomically), so ending at once loses only the work in flight. Python runs the
    handler between bytecodes, so a graph already running finishes first. Only the main thread can set
    handlers; elsewhere the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        try:
            text = message()
        except Exception:  # noqa: BLE001 - the exit must happen
            text = "error: interrupted"
        with contextlib.suppress(Exception):
            sys.stdout.flush()  # results printed so far
        try:
            fd = sys.stderr.fileno()
        except Exception:  # noqa: BLE001 - a replaced stderr
            fd = 2
        with contextlib.suppress(OSError):
            os.write(fd, (text + "\n").encode("utf-8", "backslashreplace"))  # not sys.stderr: it may be mid-write
        os._exit(130)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def cli_main(run, argv=None, usage_errors=(), interrupted="error: interrupted", exit_on_signal=False):
    """Run a command line's `run(argv)`: CliError, errors.UsageError (and `usage_errors`) -> one line, exit 2;
    any other failure -> one line, exit 1 (MS_OCR_DEBUG=1 shows the traceback); Ctrl-C -> `interrupted` (a
    line, or a function returning it), exit 130. exit_on_signal: Ctrl-C and SIGTERM end the process at once
    (exit_on_interrupt), set up before anything heavy (NumPy, MindSpore) is imported."""
    message = interrupted if callable(interrupted) else (lambda: interrupted)
    with exit_on_interrupt(message) if exit_on_signal else contextlib.nullcontext():
        from ms_ocr.errors import UsageError, user_error_message
        try:
            return run(sys.argv[1:] if argv is None else argv)
        except (CliError, UsageError) + tuple(usage_errors) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(message(), file=sys.stderr)
            return 130
        except Exception as e:  # every failure is one line; MS_OCR_DEBUG=1 shows the traceback
            if os.environ.get("MS_OCR_DEBUG"):
                raise
            print(f"error: {user_error_message(e)}", file=sys.stderr)
            return 1
