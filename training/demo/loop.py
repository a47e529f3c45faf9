"""The demo model's training loop: curriculum and length-bucketed batches, guided attention and the reading aid,
evaluation, the --minutes clock, resumable state, DDP over processes, and the command line (scripts/train_demo.py)."""

import argparse
import json
import math
import os
import random
import sys
import time

from training.demo import data as demo_data
from training.demo.model import (GUIDE_HEAD, GUIDE_LAYER, MAX_PIXELS, MAX_PIXELS_CROPS, TEXT, Batcher, cer, export,
                                 fast_vision, greedy_texts, image_processor, model_config, text_config)
from training.demo.tokenizer import SEEDS, VOCAB_SIZE, _write_json, train_tokenizer

def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, steps - warmup))))


def max_pixels(args):
    return MAX_PIXELS_CROPS if args.data == "crops" else MAX_PIXELS


def evaluate(model, batcher, sets, max_new_tokens=64, line_height=None):
    """CER of each set; with `line_height`, the crop sets ("crops...") are read as ms_ocr reads them for a line
    reader: each text line found and scaled to that height (ms_ocr/processing/text_lines.py), answers joined by
    "\n"."""
    from ms_ocr.processing.text_lines import line_images
    model.eval()
    figures = {}
    for name, items in sets.items():
        if line_height and name.startswith("crops"):
            lines = [line_images(img, line_height) for img, _ in items]
            flat = iter(greedy_texts(model, batcher, [im for group in lines for im in group], max_new_tokens))
            preds = ["\n".join(next(flat) for _ in group) for group in lines]
        else:
            preds = greedy_texts(model, batcher, [img for img, _ in items], max_new_tokens)
        figures[name] = cer(preds, [t for _, t in items])
    model.train()
    return figures


EVAL_TOKENS = {"lines": 64, "crops": 160, "crop-lines": 64}  # crops: a block of four 32-character lines is ~140 tokens
LINE_HEIGHT = 34  # --data crop-lines: the height the line reader scales each line to (text_line_height)
EVAL_SECONDS = 15.0  # what the final evaluation is given before the first one is timed (~5 s for 3 x 64 lines)
FINISH_SECONDS = 5.0  # export, figures and the processes' exit after it (~1 s on the 2-core Zen 4)
STATE_FILE = "train_state.pt"  # resumable state, removed when the checkpoint is written


class Ranks:
    """Data parallelism over `world` processes of one thread each (torch.distributed, gloo). On a 2-core Zen 3,
    two one-thread processes with half the batch each took 0.98 s a step of 32 lines against 1.25 s for one
    two-thread process (PyTorch's threading gains little on matrices this small), and they render their lines
    in parallel. Gradients are averaged in one all-reduce; rank 0 evaluates and writes. world 1: no process
    group."""

    def __init__(self, rank=0, world=1):
        self.rank, self.world = rank, world

    def average_grads(self, params):
        if self.world == 1:
            return
        import torch
        import torch.distributed as dist

        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat)
        flat /= self.world
        start = 0
        for p in params:
            p.grad.copy_(flat[start:start + p.numel()].view_as(p))
            start += p.numel()

    def mean(self, values):
        """Floats averaged over the ranks (rank 0's own values with one rank)."""
        if self.world == 1:
            return list(values)
        import torch
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t)
        return (t / self.world).tolist()

    def gather(self, obj):
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self):
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()


def draw_batches(rng, order_rng, per_rank, buckets, max_chars, margin, data="lines"):
    """`buckets` batches of `per_rank` lines drawn at once and grouped by length (the decoder pads a batch to its
    longest sequence: random batches of lines up to 40 characters are ~45 % padding), in an order that
    `order_rng`, seeded alike on every rank, shuffles the same way everywhere so the ranks step in lengths.
    data "crops": crops as users bring them (data.sample_crop) instead of the renderer's 28-40 px lines."""
    # sequence length ~ answer characters + image tokens: a line's width / height after resizing; a crop's pixels
    # (the processor's budget caps them)
    line = lambda: [demo_data.sample(rng, max_chars=max_chars, centres=True, margin=margin)]  # noqa: E731
    line_length = lambda item: len(item[1]) + item[0].width / item[0].height  # noqa: E731
    # each draw: a list of items (crop-lines: a crop's lines, half the draws; the others one line or crop)
    if data == "crops":
        draw, length = (lambda: [demo_data.sample_crop(rng, max_chars=max_chars)],
                        lambda item: len(item[1]) + min(item[0].width * item[0].height, MAX_PIXELS_CROPS) / 784)
    elif data == "crop-lines":  # half the renderer's lines, half the lines of crops as the line reader finds them
        draw = lambda: line() if rng.random() < 0.5 else demo_data.sample_crop_lines(  # noqa: E731
            rng, max_chars=max_chars, height=LINE_HEIGHT)
        length = line_length
    else:
        draw, length = line, line_length
    total, drawn = per_rank * max(1, buckets), []
    while len(drawn) < total:
        drawn.extend(draw())
    drawn = drawn[:total]
    if buckets > 1:
        drawn.sort(key=length)
    groups = [drawn[i * per_rank:(i + 1) * per_rank] for i in range(max(1, buckets))]
    order = list(range(len(groups)))
    order_rng.shuffle(order)
    return [groups[i] for i in order]


def held_out_crops(seed, count, fonts=demo_data.TRAIN_FONTS):
    """[(image, text)] of `count` crops of every kind from `seed` (a seed the training never draws)."""
    rng = random.Random(seed)
    return [demo_data.sample_crop(rng, fonts, max_area=None)[:2] for _ in range(count)]  # at users' sizes


def tokenizer_changes(tok, folder):
    """How many tokens of `tok` have another id (or none) in the tokenizer.json of checkpoint `folder`."""
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        theirs = json.load(f)["model"]["vocab"]
    return sum(theirs.get(token) != i for token, i in tok.get_vocab().items())


def train(args, ranks=None):
    import torch
    from transformers import PaddleOCRVLForConditionalGeneration

    ranks = ranks or Ranks()
    torch.set_num_threads(max(1, args.threads // ranks.world))
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    tok = train_tokenizer()
    batcher = Batcher(tok, image_processor(max_pixels(args)))
    model = PaddleOCRVLForConditionalGeneration(model_config(text_config(args)))
    if args.init:  # a second stage: the weights of a checkpoint this script wrote, fresh optimizer and schedule
        trained = PaddleOCRVLForConditionalGeneration.from_pretrained(args.init, dtype=torch.float32)
        model.load_state_dict(trained.state_dict())
        del trained
        moved = tokenizer_changes(tok, args.init)
        if moved and ranks.rank == 0:  # the tokenizer is a function of the text generator, trained in every run
            print(f"note: {moved} of {tok.get_vocab_size()} tokens have other ids than in --init {args.init} (the text "
                  "generator changed since it was trained): their embeddings start from other tokens' rows",
                  flush=True)
    model.generation_config.update(eos_token_id=2, bos_token_id=1, pad_token_id=0)
    if args.guide:
        model.model.language_model.set_attn_implementation("eager")  # attention weights for the guide loss
    fast_vision(model)
    aux_head = torch.nn.Linear(TEXT["hidden_size"], VOCAB_SIZE)
    features = {}
    if args.aux:
        model.model.projector.register_forward_hook(lambda mod, inp, out: features.__setitem__("image", out))
    params = sum(p.numel() for p in model.parameters())
    if ranks.rank == 0:
        print(f"parameters: {params / 1e6:.2f} M, vocab {tok.get_vocab_size()}", flush=True)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    if args.aux:
        decay.append(aux_head.weight)
        no_decay.append(aux_head.bias)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.98),
                            fused=True)  # one kernel per parameter group: step + clipping 8 instead of 17 ms
    eval_sets = {"train_fonts": demo_data.held_out(SEEDS["held_out"], args.eval_lines),
                 "unseen_font": demo_data.held_out(SEEDS["held_out"] + 1, args.eval_lines,
                                                   fonts=(demo_data.UNSEEN_FONT,)),
                 # the training-font lines again, right margins to a multiple of 224 px as the accuracy gate has them
                 "train_fonts_margin": demo_data.held_out(SEEDS["held_out"], args.eval_lines,
                                                          pad_to=demo_data.MARGIN_PX)}
    if args.data in ("crops", "crop-lines"):  # crops of every kind, training fonts and the unseen ones
        eval_sets.update(crops=held_out_crops(SEEDS["held_out"] + 2, args.eval_lines),
                         crops_unseen=held_out_crops(SEEDS["held_out"] + 3, args.eval_lines, demo_data.UNSEEN_FONTS))
    rng = random.Random(args.seed + 7919 * ranks.rank)  # each rank draws its own lines
    order_rng = random.Random(args.seed + 104729)  # the bucket order, alike on every rank
    per_rank = args.batch // ranks.world
    queue = []  # drawn batches not yet trained on
    trained = [p for p in model.parameters()] + ([aux_head.weight, aux_head.bias] if args.aux else [])
    log = {"config": {k: v for k, v in vars(args).items() if k not in ("out", "resume", "launched")},
           "parameters": params, "loss": [], "eval": []}
    if args.init and os.path.exists(os.path.join(args.init, "training.json")):
        with open(os.path.join(args.init, "training.json")) as f:
            log["init_log"] = json.load(f)  # the first stage's curve and figures travel with the checkpoint
    state_path = os.path.join(args.out, STATE_FILE)
    first, offset = 0, 0.0
    if args.resume and os.path.exists(state_path):
        state = torch.load(state_path, weights_only=False)
        same = ("minutes", "stop_after")  # may change between the parts of a run
        if {k: v for k, v in state["log"]["config"].items() if k not in same} != \
                {k: v for k, v in log["config"].items() if k not in same}:
            sys.exit(f"error: {state_path} is from a run with other options: {state['log']['config']}")
        model.load_state_dict(state["model"])
        aux_head.load_state_dict(state["aux_head"])
        opt.load_state_dict(state["opt"])
        mine = state["ranks"][ranks.rank]
        rng.setstate(mine["rng"])
        queue = mine["queue"]
        order_rng.setstate(state["order_rng"])
        torch.set_rng_state(state["torch_rng"])
        log, first = state["log"], state["step"] + 1
        offset = log["loss"][-1][2]
        if ranks.rank == 0:
            print(f"resumed from {state_path} at step {first}", flush=True)
    start = time.time() - offset
    # --minutes bounds the wall time from launch to the written checkpoint: the loop stops while there is still
    # time for the final evaluation (as long as the last one took) and the export (a resumed run: its earlier
    # parts' training time counts, their start-up does not)
    deadline = args.launched + args.minutes * 60 - offset
    reserve = FINISH_SECONDS + EVAL_SECONDS
    model.train()
    end = min(args.steps, args.stop_after) if args.stop_after else args.steps
    if first >= end and ranks.rank == 0:  # a resumed state already past --stop-after: nothing to train
        print(f"step {first} is past --stop-after {args.stop_after}: no step trained", flush=True)
    done = min(first, end)
    for step in range(first, end):
        lr = lr_at(step, args.steps, args.lr, args.warmup)
        for group in opt.param_groups:
            group["lr"] = lr
        # curriculum: short lines first, so the text-to-image alignment is found early
        max_chars = round(8 + (demo_data.MAX_CHARS - 8) * min(1.0, step / args.curriculum)) if args.curriculum \
            else demo_data.MAX_CHARS
        if not queue:  # --crops-from: the renderer's lines first, crops from that step on
            data = "lines" if step < args.crops_from else args.data
            queue = draw_batches(rng, order_rng, per_rank, args.buckets, max_chars, args.margin, data)
        images, texts, xs = zip(*queue.pop(0))
        inputs = batcher.train_inputs(list(images), list(texts), list(xs))
        guide, aux_index, aux_target = inputs.pop("guide"), inputs.pop("aux_index"), inputs.pop("aux_target")
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            out = model(**inputs, output_attentions=bool(args.guide))
            loss = out.loss.float()
            if args.guide:
                attn = out.attentions[GUIDE_LAYER][:, GUIDE_HEAD].float()  # (batch, query, key)
                q = (guide >= 0).nonzero(as_tuple=True)
                guide_loss = -torch.log(attn[q[0], q[1], guide[q]] + 1e-6).mean()
                loss = loss + args.guide * guide_loss
            if args.aux:
                aux_loss = torch.nn.functional.cross_entropy(aux_head(features["image"][aux_index]).float(),
                                                             aux_target)
                loss = loss + args.aux * aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        ranks.average_grads(trained)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        elapsed = time.time() - start
        # the losses averaged over the ranks, and rank 0's clock decides when to stop
        lm_loss, guide_value, aux_value, over = ranks.mean(
            [out.loss.item(), guide_loss.item() if args.guide else 0.0, aux_loss.item() if args.aux else 0.0,
             float(ranks.rank == 0 and time.time() + reserve > deadline)])
        log["loss"].append([step, round(lm_loss, 5), round(elapsed, 1)])
        extra = ""
        if args.guide:
            log.setdefault("guide_loss", []).append([step, round(guide_value, 5)])
            extra += f" guide {guide_value:.4f}"
        if args.aux:
            log.setdefault("aux_loss", []).append([step, round(aux_value, 5)])
            extra += f" aux {aux_value:.4f}"
        if step % 10 == 0 and ranks.rank == 0:
            print(f"step {step} loss {lm_loss:.4f}{extra} lr {lr:.2e} {elapsed:.0f}s", flush=True)
        done = step + 1
        last = done == end or over > 0
        if (args.eval_every and step and step % args.eval_every == 0) or last:
            if ranks.rank == 0:
                began = time.time()
                figures = evaluate(model, batcher, eval_sets, EVAL_TOKENS[args.data],
                                   LINE_HEIGHT if args.data == "crop-lines" else None)
                reserve = FINISH_SECONDS + time.time() - began
                log["eval"].append({"step": step, "seconds": round(time.time() - start, 1), **figures})
                print(f"step {step} held-out CER {figures}", flush=True)
            per_rank_state = ranks.gather({"rng": rng.getstate(), "queue": queue})
            if not last and ranks.rank == 0:  # a restart resumes here (--resume)
                os.makedirs(args.out, exist_ok=True)
                torch.save({"model": model.state_dict(), "aux_head": aux_head.state_dict(), "opt": opt.state_dict(),
                            "ranks": per_rank_state, "order_rng": order_rng.getstate(),
                            "torch_rng": torch.get_rng_state(), "log": log, "step": step}, state_path + ".tmp")
                os.replace(state_path + ".tmp", state_path)
            ranks.barrier()
        if last:
            break
    log["steps_done"] = done
    log["seconds"] = round(time.time() - start, 1)
    return model, tok, log


def save_figures(log, out_dir):
    """training.json (loss per step, held-out CER per evaluation) and training.png (drawn with Pillow)."""
    from PIL import Image, ImageDraw

    _write_json(os.path.join(out_dir, "training.json"), log)
    w, h, m = 720, 360, 50
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    d.rectangle([m, m // 2, w - m, h - m], outline="black")
    steps = max(1, log["loss"][-1][0])
    losses = [max(v, 1e-3) for _, v, _ in log["loss"]]
    lo, hi = math.log10(min(losses)), math.log10(max(losses))

    def xy(step, frac):
        return m + (w - 2 * m) * step / steps, h - m - (h - 1.5 * m) * frac

    d.line([xy(s_, (math.log10(max(v, 1e-3)) - lo) / max(hi - lo, 1e-6)) for s_, v, _ in log["loss"]],
           fill="steelblue", width=1)
    for key, colour in (("train_fonts", "firebrick"), ("unseen_font", "darkorange"), ("train_fonts_margin", "green"),
                        ("crops", "purple"), ("crops_unseen", "gray")):
        points = [xy(e["step"], min(1.0, e[key])) for e in log["eval"] if key in e]
        if len(points) > 1:
            d.line(points, fill=colour, width=2)
        for x, y in points:
            d.ellipse([x - 3, y - 3, x + 3, y + 3], fill=colour)
    d.text((m, 4), f"train loss (blue, log {10 ** lo:.3g}..{10 ** hi:.3g}); held-out CER 0..100%: train fonts (red), "
                   f"unseen font (orange), train fonts with margins (green), crops (purple; unseen fonts: grey)",
           fill="black")
    d.text((m, h - m + 6), "step 0", fill="black")
    d.text((w - m - 60, h - m + 6), f"step {steps}", fill="black")
    img.save(os.path.join(out_dir, "training.png"))


def cpu_has_bf16():
    """True where the CPU has native bf16 dot products (x86 AVX512_BF16 / AMX-BF16, Arm BF16)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


# The committed checkpoint's two stages (ms_ocr/demo/README.md): `--recipe --out DIR` runs both, the first into
# DIR-lines (60 minutes on two AVX512_BF16 cores), the second from it into DIR (3,600 steps, ~42 minutes)
RECIPE = (["--steps", "10800", "--eval-every", "1000", "--minutes", "60", "--precision", "bf16", "--text-layers", "3",
           "--text-intermediate", "512"],
          ["--data", "crop-lines", "--steps", "3600", "--minutes", "45", "--eval-every", "500", "--precision", "bf16",
           "--text-layers", "3", "--text-intermediate", "512", "--aux", "0", "--lr", "2e-4", "--curriculum", "0"])


def recipe_commands(out, extra=()):
    """The argument lists of the recipe's two stages into `out`, `extra` (e.g. --resume) added to both."""
    first = out.rstrip("/" + os.sep) + "-lines"
    return [["--out", first, *RECIPE[0], *extra], ["--init", first, "--out", out, *RECIPE[1], *extra]]


def _recipe(argv):
    p = argparse.ArgumentParser(description="the committed demo checkpoint's two training stages, one after the other")
    p.add_argument("--recipe", action="store_true")
    p.add_argument("--out", required=True, help="checkpoint folder of the second stage (the first: <out>-lines)")
    p.add_argument("--resume", action="store_true", help="go on where an interrupted recipe stopped")
    p.add_argument("--threads", default=None, help="as for one stage")
    args = p.parse_args(argv)
    extra = (["--resume"] if args.resume else []) + (["--threads", args.threads] if args.threads else [])
    for i, stage in enumerate(recipe_commands(args.out, extra)):
        out = stage[stage.index("--out") + 1]
        if args.resume and os.path.isfile(os.path.join(out, "training.json")) and \
                not os.path.exists(os.path.join(out, STATE_FILE)):  # written (the export removes the state)
            print(f"stage {i + 1} already written in {out}", flush=True)
            continue
        main(stage)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--recipe" in argv:
        return _recipe(argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="checkpoint folder to write")
    p.add_argument("--steps", type=int, default=6500)
    p.add_argument("--minutes", type=float, default=60.0, help="stop early, so that the whole run (start-up, "
                   "training, final evaluation, export) takes at most this long")
    p.add_argument("--stop-after", type=int, default=0, help="stop after this many steps, the schedule still over "
                   "--steps (repeats a run that --minutes stopped: its training.json says steps_done)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-4, help="peak learning rate (1e-3 and above: the model never "
                   "starts reading)")
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--curriculum", type=int, default=1000, help="steps over which the longest line grows from 8 "
                                                                 "characters to the full length (0: off)")
    p.add_argument("--guide", type=float, default=1.0, help="weight of the guided-attention loss (GUIDE_LAYER, "
                                                            "GUIDE_HEAD; 0: off)")
    p.add_argument("--aux", type=float, default=1.0, help="weight of the per-image-token character loss (0: off)")
    p.add_argument("--data", choices=("lines", "crops", "crop-lines"), default="lines", help="lines: the "
                   "renderer's 28-40 px lines; crops: crops as users bring them, 20-200 px high with paper on every "
                   "side, screenshots and 2-4-line blocks (training/demo/data.py sample_crop); crop-lines: half the "
                   "renderer's lines, half the lines of such crops as ms_ocr's line reader finds and scales them "
                   "(text_line_height 34; the committed checkpoint's second stage)")
    p.add_argument("--crops-from", type=int, default=0, help="with --data crops: train on the renderer's lines "
                   "until this step (the text-to-image alignment is found on them first), crops after it")
    p.add_argument("--margin", type=float, default=0.5, help="share of training lines given a blank right margin "
                   "(without one, the model reads a margin as more text)")
    p.add_argument("--init", default=None, help="start from the weights of a checkpoint folder this script wrote "
                   "(fresh optimizer, schedule and --aux head: use with --aux 0)")
    p.add_argument("--text-layers", type=int, default=TEXT["num_hidden_layers"],
                   help="decoder layers (the committed checkpoint: 3 with --text-intermediate 512, 0.85x the step of "
                   "the default 4 and 768, see docs/journal/demo-training.md)")
    p.add_argument("--text-intermediate", type=int, default=TEXT["intermediate_size"], help="decoder MLP width")
    p.add_argument("--eval-every", type=int, default=1000)
    p.add_argument("--eval-lines", type=int, default=64)
    p.add_argument("--threads", type=int, default=2, help="cores to use, split over --procs")
    p.add_argument("--procs", type=int, default=2, help="data-parallel processes (--batch is split between them)")
    p.add_argument("--buckets", type=int, default=4, help="draw this many batches at once and group them by length "
                   "(1: plain random batches)")
    p.add_argument("--precision", choices=("fp32", "bf16", "auto"), default="fp32",
                   help="compute of the training steps: bf16 = autocast (fp32 master weights, optimizer and losses; "
                   "evaluation stays fp32), auto = bf16 where the CPU has bf16 dot products (AVX512_BF16, AMX, Arm "
                   "BF16). On the 2-core Zen 4 a two-process step took 0.61 s against 0.66 s in fp32: see "
                   "docs/journal/demo-training.md. The committed checkpoint was trained in bf16")
    p.add_argument("--seed", type=int, default=SEEDS["train"])
    p.add_argument("--resume", action="store_true", help=f"go on from <out>/{STATE_FILE}, which every evaluation "
                   "writes (same options)")
    p.add_argument("--recipe", action="store_true", help="the committed checkpoint's two stages, one after the other "
                   "(RECIPE: the first into <out>-lines, then the second into <out>; with --resume, --threads)")
    args = p.parse_args(argv)
    args.launched = time.time()  # --minutes counts from here (start-up, tokenizer, evaluation sets included)
    if args.precision == "auto":
        args.precision = "bf16" if cpu_has_bf16() else "fp32"
    if args.guide and args.text_layers <= GUIDE_LAYER:
        p.error(f"--guide needs decoder layer {GUIDE_LAYER}: --text-layers must be > {GUIDE_LAYER}")
    if args.init:
        try:
            with open(os.path.join(args.init, "config.json"), encoding="utf-8") as f:
                init = json.load(f)
        except (OSError, ValueError) as e:
            p.error(f"--init {args.init}: no readable config.json ({e})")
        shape = (init.get("num_hidden_layers"), init.get("intermediate_size"))
        if shape != (args.text_layers, args.text_intermediate):
            p.error(f"--init {args.init} has a decoder of {shape[0]} layers with an MLP of {shape[1]}: pass "
                    f"--text-layers {shape[0]} --text-intermediate {shape[1]}")
    args.procs = max(1, min(args.procs, args.threads))
    if args.batch % args.procs:
        p.error(f"--batch {args.batch} does not split over --procs {args.procs}")
    if args.procs == 1:
        _finish(args, *train(args))
        return
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the process group
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank_main, args=(args, port), nprocs=args.procs, join=True)


def _rank_main(rank, args, port):
    import datetime

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.procs,
                            timeout=datetime.timedelta(hours=3))  # rank 1 waits at barriers while rank 0 evaluates
    try:
        model, tok, log = train(args, Ranks(rank, args.procs))
        if rank == 0:
            _finish(args, model, tok, log)
    finally:
        dist.destroy_process_group()


def _finish(args, model, tok, log):
    export(model, tok, args.out, text_config(args), max_pixels(args),
           LINE_HEIGHT if args.data == "crop-lines" else None)
    if os.path.exists(os.path.join(args.out, STATE_FILE)):
        os.remove(os.path.join(args.out, STATE_FILE))
    save_figures(log, args.out)
    print(f"wrote {args.out}: {log['steps_done']} steps in {log['seconds']:.0f}s, held-out CER {log['eval'][-1]}")

