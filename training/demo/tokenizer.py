"""The demo model's tokenizer: a byte-level BPE over the rendered corpus, with PaddleOCR-VL's special tokens and
the hub's chat template, written as tokenizer.json / tokenizer_config.json."""

import json
import os
import re

from bench.paddle_tokens import HUB_CHAT_TEMPLATE
from training.demo import data as demo_data

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


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")
