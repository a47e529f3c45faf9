"""Command line OCR: python -m ms_ocr.infer --model paddleocr-vl --image page.png [--task ocr]."""

import argparse
import contextlib
import os
import signal
import sys
import threading

# MindSpore logs warnings (e.g. absent Ascend plugins) to stderr on import; keep the CLI's output clean.
os.environ.setdefault("GLOG_v", "3")


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


MAX_DPI = 600  # PDF pages: past this the models' own pixel limits resize the page down again; each DPI step
# up costs memory per page in flight (3,000 DPI held ~1.1 GB a page)

# bounds every entry point's shared options obey: (flag, test, what it must be)
_BOUNDS = (
    ("threads", lambda v: v >= 1, "at least 1"),
    ("seed", lambda v: 0 <= v < 2 ** 64, "in 0..2**64-1"),
    ("temperature", lambda v: 0 <= v < float("inf"), "a finite number >= 0"),
    ("top_p", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("top_k", lambda v: v >= 0, ">= 0 (0: off)"),
    ("repetition_penalty", lambda v: 0 < v < float("inf"), "a finite number > 0"),
    ("no_repeat_ngram", lambda v: v >= 0, ">= 0 (0: off)"),
    ("dpi", lambda v: 10 <= v <= MAX_DPI, f"in 10..{MAX_DPI}"),
)


class _Parser(argparse.ArgumentParser):
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
        return parsed


def build_parser():
    p = _Parser(prog="python -m ms_ocr.infer", description="OCR images with a MindSpore VLM.")
    p.add_argument("--model", help="model name: paddleocr-vl, hunyuan-ocr, deepseek-ocr, deepseek-ocr2 (optional with "
                                   "--mindir)")
    p.add_argument("--mindir", metavar="DIR", help="serve a MindIR export (python -m ms_ocr.export) instead of a "
                                                   "checkpoint")
    p.add_argument("--model-path", help="checkpoint folder (hub download or ms_ocr.convert output)")
    p.add_argument("--image", nargs="+", required=True, help="image file(s): png, jpg, webp, bmp, tiff")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--task", help="task prompt (paddleocr-vl: ocr, table, formula, chart; hunyuan-ocr: ocr, "
                                  "spotting, parse, formula, table, chart, subtitles, translate; deepseek-ocr: ocr, "
                                  "markdown, grounding, figure, describe; deepseek-ocr2: ocr, markdown, figure, "
                                  "describe)")
    p.add_argument("--mode", choices=["tiny", "small", "base", "large", "gundam"],
                   help="deepseek-ocr resolution mode (default gundam: 1024 global view + 640 tiles)")
    g.add_argument("--prompt", help="free-form prompt instead of a task")
    p.add_argument("--one-prompt", action="store_true", help="put all images into one prompt")
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16", "fp16"],
                   help="auto follows the checkpoint; on the CPU a bf16 checkpoint's weights stay bf16 in memory "
                        "(bit-identical results, half the bytes; fp32 widens them at load)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "ascend"])
    p.add_argument("--threads", type=int, default=None, help="CPU runtime threads")
    add_sampling_args(p)
    p.add_argument("--stream", action="store_true", help="print text as tokens arrive")
    p.add_argument("--json", action="store_true", help="one JSON object per image on stdout")
    p.add_argument("--figures", metavar="DIR", help="deepseek-ocr: save the crops of `image` blocks (markdown links)")
    p.add_argument("--visualize", metavar="OUT.png",
                   help="draw the parsed boxes on the image (tasks with boxes, e.g. hunyuan-ocr spotting); "
                        "several images write OUT-1.png, OUT-2.png, ...")
    p.add_argument("--dump", metavar="DIR",
                   help="precision dump: per-step raw logits and token ids of each image into DIR/<image path "
                        "name>/logits.npy, token_ids.npy (as the batch runner's --dump; scripts/compare_dumps.py)")
    return p


def add_sampling_args(p):
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--no-repeat-ngram", type=int, default=None,
                   help="ban repeating n-grams of this size (0 = off; default: the model's, e.g. deepseek-ocr 30 "
                        "within 90 tokens)")
    p.add_argument("--seed", type=int, default=None)


def sampling_config(args, package, pipe):
    """SamplingConfig from the shared sampling options and the model's no-repeat default; CliError if invalid."""
    from ms_ocr.generate import SamplingConfig
    ngram, window, exempt = args.no_repeat_ngram or 0, 0, ()
    default = getattr(package, "NO_REPEAT", None)
    if args.no_repeat_ngram is None and default:
        tok = pipe.processor.tokenizer
        ngram, window = default["size"], default["window"]
        exempt = tuple(i for i in (tok.token_to_id(t) for t in default["exempt_tokens"]) if i is not None)
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                              top_p=args.top_p, top_k=args.top_k, repetition_penalty=args.repetition_penalty,
                              no_repeat_ngram_size=ngram, no_repeat_window=window, no_repeat_exempt=exempt,
                              seed=args.seed)
    try:
        sampling.validate()
    except ValueError as e:
        raise CliError(str(e)) from None
    return sampling


class StreamPrinter:
    """Prints the answer as tokens arrive: what no later token can change (ms_ocr.textstream.TextStream, the
    server's streams' detokeniser, in its exact mode; bytes of a character split over tokens wait for its last),
    then the rest of the final, post-processed text."""

    def __init__(self, tokenizer, eos_ids, out=sys.stdout):
        from ms_ocr.textstream import TextStream
        self.stream, self.out, self.printed = TextStream(tokenizer, True, eos_ids, exact=True), out, ""

    def __call__(self, token):
        self.stream.add(token)
        text = self.stream.pending()
        if text:
            self.out.write(text)
            self.out.flush()
            self.printed += text

    def finish(self, text):
        self.out.write(text[len(self.printed):] if text.startswith(self.printed) else "\n" + text)
        self.out.write("\n")
        self.out.flush()


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


def _export_model(folder):
    import json
    try:
        with open(os.path.join(folder, "meta.json")) as f:
            return json.load(f)["model"]
    except (OSError, ValueError, KeyError):
        raise CliError(f"{folder} is not a MindIR export (no readable meta.json); create one with "
                       "python -m ms_ocr.export") from None


def visualize_paths(out, count):
    if count == 1:
        return [out]
    stem, ext = os.path.splitext(out)
    return [f"{stem}-{i}{ext or '.png'}" for i in range(1, count + 1)]


def save_dump(folder, paths, step_logits, token_ids):
    """logits.npy [steps, V] (float32) and token_ids.npy [steps] of one prompt into folder/<name of its image
    paths>/ (batch.names.path_name, joined by commas for --one-prompt); returns that folder."""
    import numpy as np

    from ms_ocr.batch.names import path_name
    from ms_ocr.batch.results import write_dump
    return write_dump(os.path.join(folder, ",".join(path_name(p) for p in paths)),
                      np.stack(step_logits).astype(np.float32), np.asarray(token_ids, np.int64))


def _use_demo(args):
    """No --model: run the embedded demo checkpoint when it exists and no weights are in the default folders."""
    from ms_ocr.models import ALIASES, DEMO_MODEL, HUB_IDS, demo_checkpoint
    from ms_ocr.weights import default_dir
    demo = demo_checkpoint()
    if demo is None or any(os.path.isfile(os.path.join(default_dir(name), "config.json")) for name in ALIASES):
        raise CliError("the following arguments are required: --model")
    args.model, args.model_path = DEMO_MODEL, demo
    print("note: no --model and no weights found: running the built-in demo model (a tiny PaddleOCR-VL trained on "
          "synthetic printed lines, not PaddleOCR-VL's accuracy)", file=sys.stderr)
    print(f"note: for real weights pass --model paddleocr-vl (downloads {HUB_IDS['paddleocr_vl']}) or --model-path "
          "DIR", file=sys.stderr)


def run(argv):
    args = build_parser().parse_args(argv)
    if args.max_new_tokens < 1:
        raise CliError("--max-new-tokens must be at least 1")
    if args.mindir and args.model_path:
        raise CliError("give --mindir or --model-path, not both")
    if args.mindir and not args.model:
        args.model = _export_model(args.mindir)
    if not args.model:
        _use_demo(args)
    from ms_ocr.models import canonical, model_package
    try:
        canonical(args.model)
    except ValueError as e:
        raise CliError(str(e)) from None
    from ms_ocr.processing.image import load_image
    images = [(path, load_image(path)) for path in args.image]  # fail on bad images before loading weights
    package = model_package(args.model)
    if not args.mindir:
        from ms_ocr.weights import locate
        model_dir = locate(args.model, args.model_path)
    prompt, task = resolve_prompt(args, package.TASK_PROMPTS, args.model)
    if args.visualize:
        box_tasks = getattr(package, "BOX_TASKS", ())
        if task not in box_tasks:
            raise CliError(f"--visualize needs a task that outputs boxes ({args.model}: "
                           f"{', '.join(box_tasks) or 'none'})")
        if args.one_prompt and len(images) > 1:
            raise CliError("--visualize draws one image's boxes; drop --one-prompt")
        out_dir = os.path.dirname(os.path.abspath(args.visualize))
        if not os.path.isdir(out_dir):
            raise CliError(f"--visualize folder {out_dir} does not exist")
    if args.dump:
        try:
            os.makedirs(args.dump, exist_ok=True)
        except OSError as e:
            raise CliError(f"cannot create --dump folder {args.dump}: {e.strerror}") from None

    from ms_ocr.device import setup
    modes = getattr(package, "MODES", None)
    if args.mode and not modes:
        raise CliError(f"--mode applies to deepseek-ocr, not {args.model}")
    target = setup(args.device, args.threads)
    if args.mindir:
        from ms_ocr.export import load_mindir
        pipe = load_mindir(args.mindir, args.model)
    else:
        from ms_ocr.models.loading import staged_weights
        one_request = args.one_prompt or len(images) == 1
        # one request: the vision weights are released before the text weights load (lower peak memory)
        with staged_weights() if one_request and os.environ.get("MS_OCR_STAGED", "1") != "0" else \
                contextlib.nullcontext():
            pipe = package.load(model_dir, target, args.dtype)
    if args.mode:
        pipe.processor.set_mode(args.mode)
    sampling = sampling_config(args, package, pipe)
    from ms_ocr.batch.names import display, to_json
    groups = [images] if args.one_prompt else [[item] for item in images]
    drawings = visualize_paths(args.visualize, len(groups)) if args.visualize else [None] * len(groups)
    runtime = getattr(pipe, "runtime", None)
    for i, (group, drawing) in enumerate(zip(groups, drawings)):
        name = ",".join(path for path, _ in group)
        if target == "CPU" and hasattr(runtime, "release_vision_graphs"):
            # no image size seen so far comes back: free the vision graphs before prefill (lower peak memory)
            seen = {img.size for g in groups[:i + 1] for _, img in g}
            runtime.release_vision_graphs = not any(img.size in seen for g in groups[i + 1:] for _, img in g)
        printer = StreamPrinter(pipe.processor.tokenizer, pipe.eos_ids) if args.stream and not args.json else None
        if printer and len(groups) > 1:
            print(f"== {display(name)} ==", flush=True)
        step_logits = []
        result = pipe.run([img for _, img in group], prompt, sampling, on_token=printer, task=task,
                          on_logits=step_logits.append if args.dump else None)
        if args.dump:
            dump_dir = save_dump(args.dump, [path for path, _ in group], step_logits, result["token_ids"])
        if drawing:
            from ms_ocr.processing.boxes import draw_boxes
            draw_boxes(group[0][1], result.get("boxes", [])).save(drawing)
        if args.figures and "grounding" in result:
            from ms_ocr.models.deepseek_ocr.grounding import save_figures
            save_figures(group[0][1], result["grounding"], args.figures)
        if args.json:
            record = {"image": name, "text": result["text"], "token_ids": result["token_ids"],
                      "finish_reason": result["finish_reason"], "timings": result["timings"]}
            for key in ("boxes", "grounding"):
                if key in result:
                    record[key] = result[key]
            if args.dump:
                record["dump"] = dump_dir
            print(to_json(record), flush=True)
        elif printer:
            printer.finish(result["text"])
        else:
            if len(groups) > 1:
                print(f"== {display(name)} ==")
            print(result["text"], flush=True)
    return 0


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


def main(argv=None):
    return cli_main(run, argv, exit_on_signal=True)


if __name__ == "__main__":
    sys.exit(main())
