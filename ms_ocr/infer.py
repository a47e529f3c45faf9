"""Command line OCR: python -m ms_ocr.infer --model paddleocr-vl --image page.png [--task ocr]."""

import os
import sys

# MindSpore logs warnings (e.g. absent Ascend plugins) to stderr on import; keep the CLI's output clean.
os.environ.setdefault("GLOG_v", "3")

from ms_ocr import models  # noqa: E402 - the registry: plain data, no framework import
from ms_ocr.cli import (CliError, Parser, add_device_args, add_mode_arg, add_output_args,  # noqa: E402
                        add_sampling_args, apply_output_args, cli_main, load_pipeline, model_spec, print_notes,
                        resolve_prompt, sampling_config)


def build_parser():
    p = Parser(prog="python -m ms_ocr.infer", description="OCR images with a MindSpore VLM.")
    p.add_argument("--model", help=f"model name: {', '.join(models.names())} (optional with --mindir)")
    p.add_argument("--mindir", metavar="DIR", help="serve a MindIR export (python -m ms_ocr.export) instead of a "
                                                   "checkpoint")
    p.add_argument("--model-path", help="checkpoint folder (hub download or ms_ocr.convert output)")
    p.add_argument("--image", nargs="+", required=True, help="image file(s): png, jpg, webp, bmp, tiff")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--task", help=f"task prompt ({models.tasks_help()})")
    add_mode_arg(p)
    g.add_argument("--prompt", help="free-form prompt instead of a task")
    p.add_argument("--one-prompt", action="store_true", help="put all images into one prompt")
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--ignore-eos", action="store_true",
                   help="run every answer to --max-new-tokens, past the end-of-text token (benchmarks; vLLM's "
                        "ignore_eos; the model's stop rules still apply unless --no-early-stop)")
    add_device_args(p)
    add_sampling_args(p)
    add_output_args(p)
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
    from ms_ocr.weights import default_dir
    demo = models.demo_checkpoint()
    if demo is None or any(os.path.isfile(os.path.join(default_dir(name), "config.json"))
                           for spec in models.specs() for name in spec.names):
        raise CliError("the following arguments are required: --model")
    args.model, args.model_path = models.DEMO_MODEL, demo
    print("note: no --model and no weights found: running the built-in demo model (a tiny PaddleOCR-VL trained on "
          "synthetic printed lines, not PaddleOCR-VL's accuracy)", file=sys.stderr)
    hub_id = models.get(models.DEMO_MODEL).hub_id
    print(f"note: for real weights pass --model {models.DEMO_MODEL} (downloads {hub_id}) or --model-path "
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
    spec = model_spec(args)
    from ms_ocr.processing.image import load_image
    images = [(path, load_image(path)) for path in args.image]  # fail on bad images before loading weights
    if not args.mindir:
        from ms_ocr.weights import locate
        model_dir = locate(args.model, args.model_path)
    spec = spec.for_checkpoint(args.mindir or model_dir)  # the checkpoint version's tasks and defaults
    prompt, task = resolve_prompt(args, spec.tasks, args.model)
    if args.visualize:
        box_tasks = spec.box_tasks
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

    if args.mindir:
        from ms_ocr.device import setup
        from ms_ocr.export import load_mindir
        target = setup(args.device, args.threads)
        pipe = load_mindir(args.mindir, args.model)
        if args.mode:
            pipe.processor.set_mode(args.mode)
        apply_output_args(args, spec, pipe)
    else:
        # one request: the vision weights are released before the text weights load (lower peak memory)
        one_request = args.one_prompt or len(images) == 1
        target, pipe = load_pipeline(args, spec, model_dir,
                                     staged=one_request and os.environ.get("MS_OCR_STAGED", "1") != "0")
    sampling = sampling_config(args, spec, pipe)
    from ms_ocr.batch.names import display, to_json
    groups = [images] if args.one_prompt else [[item] for item in images]
    drawings = visualize_paths(args.visualize, len(groups)) if args.visualize else [None] * len(groups)
    for i, (group, drawing) in enumerate(zip(groups, drawings)):
        name = ",".join(path for path, _ in group)
        # on the CPU, when no image size seen so far comes back: the vision graphs are freed before prefill
        # (lower peak memory)
        seen = {img.size for g in groups[:i + 1] for _, img in g}
        release = target == "CPU" and not any(img.size in seen for g in groups[i + 1:] for _, img in g)
        printer = StreamPrinter(pipe.processor.tokenizer, pipe.eos_ids) if args.stream and not args.json else None
        if printer and len(groups) > 1:
            print(f"== {display(name)} ==", flush=True)
        step_logits = []
        result = pipe.run([img for _, img in group], prompt, sampling, on_token=printer, task=task,
                          on_logits=step_logits.append if args.dump else None, release_vision=release,
                          ignore_eos=args.ignore_eos)
        print_notes(display(name), result)
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
            for key in ("boxes", "grounding", "stopped_by"):
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


def main(argv=None):
    return cli_main(run, argv, exit_on_signal=True)


if __name__ == "__main__":
    sys.exit(main())
