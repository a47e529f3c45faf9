"""Train the embedded demo model: a tiny PaddleOCR-VL (transformers' own class) on rendered text lines.

    python scripts/train_demo.py --out ms_ocr/demo/paddleocr_vl --steps 10800 --eval-every 1000 --minutes 60 \
        --precision bf16 --text-layers 3 --text-intermediate 512

(the committed checkpoint's command: 60 minutes on two cores of an AVX512_BF16 CPU, where the clock stopped it at
step 9,365; `--stop-after 9365` with a larger --minutes repeats it on a slower CPU; see ms_ocr/demo/README.md)

Test-only dependencies (torch, transformers, tokenizers); fonts from scripts/demo_data.FONT_PACKAGES. The run is
deterministic for a seed, a step count, a thread count and a CPU type (--minutes only stops it early; --stop-after
stops at a given step, to repeat such a run). It writes the checkpoint in the hub's layout (flat config.json, bf16
safetensors, tokenizer.json, tokenizer_config.json with the chat template, preprocessor_config.json) plus
training.json (loss curve, CER figures) and training.png beside it.
"""

import argparse
import json
import math
import os
import random
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scripts import demo_data  # noqa: E402

# PaddleOCR-VL's (ERNIE 4.5) special tokens, first in the vocabulary; <unk>/<s>/</s> keep the hub's ids 0/1/2.
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<|begin_of_sentence|>", "<|end_of_sentence|>", "<|IMAGE_PLACEHOLDER|>",
                  "<|IMAGE_START|>", "<|IMAGE_END|>", "<|VIDEO_PLACEHOLDER|>", "<mask:1>")
TOKEN_IDS = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
VOCAB_SIZE = 311  # 10 specials + 256 byte symbols + 45 merges: close to one token per character, so each output
# step reads about one glyph (with 512 tokens, ~2.5 characters a token, 1,500 steps left the held-out CER at 86 %)
PROMPT = "OCR:"
PROMPT_WEIGHT = 20000  # the template's text counts as this many corpus lines, so ~10 merges make its words (User,
# OCR, Assistant) one token each: 12 tokens around the image instead of 22, ~15 % fewer decoder tokens a training
# line (the corpus keeps the merges it had with 300 tokens and the template once)
SEEDS = dict(tokenizer=1000, train=0, held_out=7000)  # held-out lines come from a seed the training never draws
MIN_PIXELS, MAX_PIXELS = 28 * 28, 28 * 28 * 96  # a line up to 28 x 2688 px keeps its size
VISION = dict(hidden_size=192, intermediate_size=576, num_hidden_layers=4, num_attention_heads=4, num_channels=3,
              image_size=224, patch_size=14, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6,
              spatial_merge_size=2)
TEXT = dict(vocab_size=VOCAB_SIZE, hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-5,
            use_bias=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# MRoPE sections (t, h, w) take contiguous slices of the frequencies, w the lowest: with the hub's theta 5e5 and
# [8, 12, 12] a column index below 100 turns the w pairs by < 0.03 rad, so the decoder could hardly tell image
# columns apart. Lines have one row of tokens, so w gets the high frequencies (sums to head_dim / 2).
MROPE_SECTION = [4, 4, 24]
ROPE_THETA = 10000.0
SPECIAL_IDS = dict(image_token_id=TOKEN_IDS["<|IMAGE_PLACEHOLDER|>"], video_token_id=TOKEN_IDS["<|VIDEO_PLACEHOLDER|>"],
                   vision_start_token_id=TOKEN_IDS["<|IMAGE_START|>"], vision_end_token_id=TOKEN_IDS["<|IMAGE_END|>"])
IMAGE_MEAN, IMAGE_STD = [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]
# Guided attention (training only; the checkpoint is the plain architecture): one head of one decoder layer is
# taught to look, when it predicts a character, at the image token whose 28-px column holds that character's
# centre (known from the renderer). Without it the decoder has to find the text-to-image alignment by itself:
# 12 digits on one clean line stayed at chance for 340 steps of batch 32, and the full task at CER ~0.8 after
# 1,500 steps; 3 digits (2 image tokens, nothing to align) learned in 140 steps.
GUIDE_LAYER, GUIDE_HEAD = 2, 0
# Reading aid (training only, discarded at export): a linear classifier on the projector's output must name the
# characters each image token holds, so the vision tower gets a direct signal per glyph instead of one that
# has to pass through the decoder first (with the guide alone the loss followed the unguided run's).


# ---- tokenizer -------------------------------------------------------------------------------------------------

def train_tokenizer(seed=SEEDS["tokenizer"], lines=20000):
    """Byte-level BPE over the text distribution, the special tokens at ids 0..9 (deterministic for a seed)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    template = [t for t in re.split("|".join(map(re.escape, SPECIAL_TOKENS)), prompt_text(0)) if t]  # its text
    text = demo_data.corpus(seed, lines) + template * PROMPT_WEIGHT
    tok.train_from_iterator(text, trainer=trainer)
    return tok


def prompt_text(image_tokens):
    """The hub chat template rendered for one image and the OCR prompt (tests check it against jinja)."""
    image = "<|IMAGE_START|>" + "<|IMAGE_PLACEHOLDER|>" * image_tokens + "<|IMAGE_END|>"
    return f"<|begin_of_sentence|>User: {image}{PROMPT}\nAssistant: "


def _added(content):
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
            "special": True}


def write_tokenizer(tok, out_dir):
    """tokenizer.json + the hub's tokenizer_config.json (chat template inside) and special_tokens_map.json."""
    from tests.helpers.tiny_tokenizer import HUB_CHAT_TEMPLATE

    tok.save(os.path.join(out_dir, "tokenizer.json"))
    named = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<unk>",
             "cls_token": "<|begin_of_sentence|>", "sep_token": "<|end_of_sentence|>", "mask_token": "<mask:1>"}
    extra = [t for t in SPECIAL_TOKENS if t not in named.values()]
    config = {"add_bos_token": False, "add_eos_token": False,
              "added_tokens_decoder": {str(i): _added(t) for t, i in TOKEN_IDS.items()},
              "additional_special_tokens": extra, "clean_up_tokenization_spaces": False,
              "model_max_length": 4096, "tokenizer_class": "TokenizersBackend", **named,
              "chat_template": HUB_CHAT_TEMPLATE}
    _write_json(os.path.join(out_dir, "tokenizer_config.json"), config)
    _write_json(os.path.join(out_dir, "special_tokens_map.json"), {**named, "additional_special_tokens": extra})


# ---- model -----------------------------------------------------------------------------------------------------

def text_config(args):
    """TEXT with the decoder size the options ask for."""
    return {**TEXT, "num_hidden_layers": args.text_layers, "intermediate_size": args.text_intermediate}


def model_config(text=TEXT):
    from transformers import PaddleOCRVLConfig

    rope = {"rope_type": "default", "rope_theta": ROPE_THETA, "mrope_section": MROPE_SECTION}
    # tied head: transformers ties the hub's flat layout whatever its flag says, so train it tied
    return PaddleOCRVLConfig(text_config={**text, "rope_parameters": rope, "tie_word_embeddings": True},
                             vision_config=dict(VISION), tie_word_embeddings=True, **SPECIAL_IDS)


def image_processor():
    from transformers import PaddleOCRVLImageProcessorPil

    return PaddleOCRVLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, image_mean=IMAGE_MEAN,
                                        image_std=IMAGE_STD)


class Batcher:
    """Images + answers -> the model's training or generation inputs (answer-only labels)."""

    def __init__(self, tok, processor):
        self.tok, self.processor = tok, processor
        self.eos = TOKEN_IDS["</s>"]

    def encode_images(self, images):
        out = self.processor(images=images, return_tensors="pt")
        merged = (out["image_grid_thw"].prod(-1) // 4).tolist()
        return out["pixel_values"], out["image_grid_thw"], merged

    def prompt_ids(self, image_tokens):
        return self.tok.encode(prompt_text(image_tokens)).ids

    def train_inputs(self, images, texts, centres=None):
        """Model inputs with answer-only labels; with `centres` (character x centres per image, from the
        renderer) also `guide`: for each position that predicts an answer token, the sequence index of the image
        token holding that token's characters (-1 elsewhere)."""
        import torch

        pixels, grid, merged = self.encode_images(images)
        seqs, labels, guides, aux_index, aux_target = [], [], [], [], []
        offset = 0  # first image token of image b among all images' tokens (the projector's output rows)
        for b, (n, text) in enumerate(zip(merged, texts)):
            enc = self.tok.encode(text)
            prompt, answer = self.prompt_ids(n), enc.ids + [self.eos]
            seqs.append(prompt + answer)
            labels.append([-100] * len(prompt) + answer)
            if centres is not None:
                guides.append(self._guide(prompt, enc.offsets, centres[b], images[b].width, grid[b].tolist()))
                start = prompt.index(SPECIAL_IDS["image_token_id"])
                for q, k in enumerate(guides[-1]):
                    if k >= 0:
                        aux_index.append(offset + k - start)
                        aux_target.append(answer[q + 1 - len(prompt)])
            offset += n
        width = max(map(len, seqs))
        ids = torch.tensor([s + [0] * (width - len(s)) for s in seqs])
        lab = torch.tensor([s + [-100] * (width - len(s)) for s in labels])
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
        out = dict(input_ids=ids, attention_mask=mask, labels=lab, pixel_values=pixels, image_grid_thw=grid,
                   mm_token_type_ids=(ids == SPECIAL_IDS["image_token_id"]).int())
        if centres is not None:
            out["guide"] = torch.tensor([g + [-1] * (width - len(g)) for g in guides])
            out["aux_index"], out["aux_target"] = torch.tensor(aux_index), torch.tensor(aux_target)
        return out

    @staticmethod
    def _guide(prompt, offsets, xs, image_width, grid_thw):
        _, rows, cols = grid_thw[0], grid_thw[1] // 2, grid_thw[2] // 2  # merged 2x2 tokens
        first = prompt.index(SPECIAL_IDS["image_token_id"]) + (rows // 2) * cols  # the middle row of tokens
        scale = grid_thw[2] * 14 / image_width  # smart_resize's horizontal factor
        guide = [-1] * (len(prompt) + len(offsets) + 1)
        for j, (start, end) in enumerate(offsets):
            if end > start:
                x = sum(xs[start:end]) / (end - start) * scale
                guide[len(prompt) + j - 1] = first + min(cols - 1, max(0, int(x // 28)))
        return guide

    def generate_inputs(self, images):
        import torch

        pixels, grid, merged = self.encode_images(images)
        seqs = [self.prompt_ids(n) for n in merged]
        width = max(map(len, seqs))
        ids = torch.tensor([[0] * (width - len(s)) + s for s in seqs])  # left padding for generate
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
        return dict(input_ids=ids, attention_mask=mask, pixel_values=pixels, image_grid_thw=grid,
                    mm_token_type_ids=(ids == SPECIAL_IDS["image_token_id"]).int())


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def cer(predictions, references):
    """Character error rate: total edit distance / total reference characters."""
    return sum(edit_distance(p, r) for p, r in zip(predictions, references)) / max(1, sum(map(len, references)))


def greedy_texts(model, batcher, images, max_new_tokens=64, batch=16):
    import torch

    texts = []
    for i in range(0, len(images), batch):
        inputs = batcher.generate_inputs(images[i:i + batch])
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                 eos_token_id=batcher.eos, pad_token_id=0)
        for row in out[:, inputs["input_ids"].shape[1]:].tolist():
            row = row[:row.index(batcher.eos)] if batcher.eos in row else row
            texts.append(batcher.tok.decode(row, skip_special_tokens=True))
    return texts


# ---- training --------------------------------------------------------------------------------------------------

def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, steps - warmup))))


def evaluate(model, batcher, sets):
    model.eval()
    figures = {}
    for name, items in sets.items():
        preds = greedy_texts(model, batcher, [img for img, _ in items])
        figures[name] = cer(preds, [t for _, t in items])
    model.train()
    return figures


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


def draw_batches(rng, order_rng, per_rank, buckets, max_chars, margin):
    """`buckets` batches of `per_rank` lines drawn at once and grouped by length (the decoder pads a batch to its
    longest sequence: random batches of lines up to 40 characters are ~45 % padding), in an order that
    `order_rng`, seeded alike on every rank, shuffles the same way everywhere so the ranks step in lengths."""
    drawn = [demo_data.sample(rng, max_chars=max_chars, centres=True, margin=margin)
             for _ in range(per_rank * max(1, buckets))]
    if buckets > 1:  # sequence length ~ answer characters + image tokens (width / height after resizing)
        drawn.sort(key=lambda item: len(item[1]) + item[0].width / item[0].height)
    groups = [drawn[i * per_rank:(i + 1) * per_rank] for i in range(max(1, buckets))]
    order = list(range(len(groups)))
    order_rng.shuffle(order)
    return [groups[i] for i in order]


def _patch_embedding_as_linear(conv):
    """The stride-14 14x14 convolution of the patch embedding applied to 14x14 patches is one matrix product;
    as a convolution its backward took ~7 ms a step of 16 lines (the weight and its name are unchanged)."""
    import torch

    def forward(x):
        assert tuple(x.shape[-2:]) == tuple(conv.kernel_size) == tuple(conv.stride), x.shape
        out = torch.nn.functional.linear(x.reshape(x.shape[0], -1), conv.weight.reshape(conv.out_channels, -1),
                                         conv.bias)
        return out.view(x.shape[0], conv.out_channels, 1, 1)

    conv.forward = forward


def _padded_vision_attention(self, hidden_states, cu_seqlens, position_embeddings, max_seqlen=None, **kwargs):
    """PaddleOCRVisionAttention.forward (eager) with the batch's images in one padded product instead of a loop
    over images: the same function (keys beyond an image's length are masked), ~16x fewer small operations."""
    import torch
    from transformers.models.paddleocr_vl.modeling_paddleocr_vl import apply_rotary_pos_emb_vision

    n = hidden_states.shape[0]
    q, k, v = (proj(hidden_states).view(n, self.num_heads, self.head_dim)
               for proj in (self.q_proj, self.k_proj, self.v_proj))
    q, k = apply_rotary_pos_emb_vision(q, k, *position_embeddings)
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    pos = torch.arange(int(lengths.max()))
    valid = pos[None] < lengths[:, None]  # (images, longest)
    index = (cu_seqlens[:-1, None] + pos[None]).clamp(max=n - 1)
    q, k, v = (t.index_select(0, index.reshape(-1)).view(*index.shape, *t.shape[1:]).transpose(1, 2)
               for t in (q, k, v))  # (images, heads, longest, head_dim)
    scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(weights, v).transpose(1, 2)[valid]  # (patches, heads, head_dim), the images in order
    return self.out_proj(out.reshape(n, -1)), None


def fast_vision(model):
    """Training-only forms of two vision-tower steps, the same functions as transformers' (checked in
    tests/demo/test_train.py): the patch embedding as a matrix product, attention over all images at once."""
    import types

    model.model.visual.set_attn_implementation("eager")
    tower = model.model.visual.vision_model
    _patch_embedding_as_linear(tower.embeddings.patch_embedding)
    for layer in tower.encoder.layers:
        layer.self_attn.forward = types.MethodType(_padded_vision_attention, layer.self_attn)


def train(args, ranks=None):
    import torch
    from transformers import PaddleOCRVLForConditionalGeneration

    ranks = ranks or Ranks()
    torch.set_num_threads(max(1, args.threads // ranks.world))
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    tok = train_tokenizer()
    batcher = Batcher(tok, image_processor())
    model = PaddleOCRVLForConditionalGeneration(model_config(text_config(args)))
    if args.init:  # a second stage: the weights of a checkpoint this script wrote, fresh optimizer and schedule
        trained = PaddleOCRVLForConditionalGeneration.from_pretrained(args.init, dtype=torch.float32)
        model.load_state_dict(trained.state_dict())
        del trained
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
    step = first
    for step in range(first, args.steps):
        lr = lr_at(step, args.steps, args.lr, args.warmup)
        for group in opt.param_groups:
            group["lr"] = lr
        # curriculum: short lines first, so the text-to-image alignment is found early
        max_chars = round(8 + (demo_data.MAX_CHARS - 8) * min(1.0, step / args.curriculum)) if args.curriculum \
            else demo_data.MAX_CHARS
        if not queue:
            queue = draw_batches(rng, order_rng, per_rank, args.buckets, max_chars, args.margin)
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
        last = step == args.steps - 1 or step + 1 == args.stop_after or over > 0
        if (args.eval_every and step and step % args.eval_every == 0) or last:
            if ranks.rank == 0:
                began = time.time()
                figures = evaluate(model, batcher, eval_sets)
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
    log["steps_done"] = step + 1
    log["seconds"] = round(time.time() - start, 1)
    return model, tok, log


# ---- export ----------------------------------------------------------------------------------------------------

def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def flat_config(text=TEXT):
    """config.json in the hub's original flat form (text fields at the root, rope_scaling)."""
    vision = {"architectures": ["PaddleOCRVisionModel"], "model_type": "paddleocr_vl", **VISION,
              "attention_dropout": 0.0, "pad_token_id": 0, "temporal_patch_size": 2, "tokens_per_second": 2,
              "torch_dtype": "bfloat16"}
    return {"architectures": ["PaddleOCRVLForConditionalGeneration"], "model_type": "paddleocr_vl", **text,
            "rope_theta": ROPE_THETA,
            "rope_scaling": {"mrope_section": MROPE_SECTION, "rope_type": "default", "type": "default"},
            "tie_word_embeddings": True, **SPECIAL_IDS, "use_3d_rope": True, "rope_is_neox_style": True,
            "use_cache": False, "torch_dtype": "bfloat16", "vision_config": vision}


def export(model, tok, out_dir, text=TEXT):
    """The checkpoint in the hub's layout, bf16 weights."""
    import torch
    from safetensors.torch import load_file, save_file

    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model.to(torch.bfloat16).save_pretrained(tmp)  # the hub's names (visual.vision_model.*, mlp_AR.*, model.*)
        state = {}
        for name in sorted(os.listdir(tmp)):
            if name.endswith(".safetensors"):
                state.update(load_file(os.path.join(tmp, name)))
    model.float()
    save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    _write_json(os.path.join(out_dir, "config.json"), flat_config(text))
    _write_json(os.path.join(out_dir, "generation_config.json"),
                {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "use_cache": True})
    _write_json(os.path.join(out_dir, "preprocessor_config.json"),
                {"min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS, "image_mean": IMAGE_MEAN, "image_std": IMAGE_STD,
                 "patch_size": 14, "merge_size": 2, "temporal_patch_size": 1, "resample": 3,
                 "rescale_factor": 1 / 255, "do_convert_rgb": True, "do_normalize": True, "do_rescale": True,
                 "do_resize": True, "image_processor_type": "PaddleOCRVLImageProcessor"})
    write_tokenizer(tok, out_dir)


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
    for key, colour in (("train_fonts", "firebrick"), ("unseen_font", "darkorange"), ("train_fonts_margin", "green")):
        points = [xy(e["step"], min(1.0, e[key])) for e in log["eval"] if key in e]
        if len(points) > 1:
            d.line(points, fill=colour, width=2)
        for x, y in points:
            d.ellipse([x - 3, y - 3, x + 3, y + 3], fill=colour)
    d.text((m, 4), f"train loss (blue, log {10 ** lo:.3g}..{10 ** hi:.3g}); held-out CER 0..100%: train fonts (red), "
                   f"unseen font (orange), train fonts with margins (green)", fill="black")
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


def main(argv=None):
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
    p.add_argument("--margin", type=float, default=0.5, help="share of training lines given a blank right margin "
                   "(without one, the model reads a margin as more text)")
    p.add_argument("--init", default=None, help="start from the weights of a checkpoint folder this script wrote "
                   "(fresh optimizer, schedule and --aux head: use with --aux 0)")
    p.add_argument("--text-layers", type=int, default=TEXT["num_hidden_layers"],
                   help="decoder layers (the committed checkpoint: 3 with --text-intermediate 512, 0.85x the step of "
                   "the default 4 and 768, see docs/demo-training.md)")
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
                   "docs/demo-training.md. The committed checkpoint was trained in bf16")
    p.add_argument("--seed", type=int, default=SEEDS["train"])
    p.add_argument("--resume", action="store_true", help=f"go on from <out>/{STATE_FILE}, which every evaluation "
                   "writes (same options)")
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
    export(model, tok, args.out, text_config(args))
    if os.path.exists(os.path.join(args.out, STATE_FILE)):
        os.remove(os.path.join(args.out, STATE_FILE))
    save_figures(log, args.out)
    print(f"wrote {args.out}: {log['steps_done']} steps in {log['seconds']:.0f}s, held-out CER {log['eval'][-1]}")


if __name__ == "__main__":
    main()
