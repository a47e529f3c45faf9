"""A tiny sentencepiece BPE tokenizer carrying PaddleOCR-VL's (ERNIE 4.5) special tokens, for the tiny test checkpoints
and the real-size random-weight ones (bench/real_size.py).

The base model is trained in-process on a synthetic English corpus; the special tokens (bench/paddle_tokens.py) sit
right after it, as added tokens, so every id stays below the tiny model's vocab_size.
"""

import io
import json
import os
import random
import tempfile

from bench.paddle_tokens import ADDED, HUB_CHAT_TEMPLATE, SPM_VOCAB, TOKEN_IDS

_WORDS = ("the of and to in is was for on that with as by at from it an are were which this be or has had not but "
          "have one their also its first new after who been two they other OCR Table Recognition Formula Chart "
          "Text Page Document Figure Title User Assistant image scan line word number value total report year "
          "data").split()
_ALL_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 .,:;!?()[]{}<>-_=+*/\\|'\"#$%&@^`~"


def corpus(seed):
    """Synthetic English lines (every printable ASCII character appears at least once)."""
    rng = random.Random(seed)
    lines = [_ALL_CHARS]
    for _ in range(3000):
        line = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12)))
        line = (line.capitalize() if rng.random() < 0.3 else line) + rng.choice(".,:!?; ")
        if rng.random() < 0.3:
            line += f" {rng.randint(0, 9999)}"
        lines.append(line)
    return lines


def train_spm(seed, **options):
    """Serialized sentencepiece BPE model (identity normalisation, byte fallback, dummy prefix): deterministic for
    a seed. `options` override trainer settings (model_type, normalization_rule_name, user_defined_symbols, ...)."""
    import sentencepiece as spm

    out = io.BytesIO()
    settings = dict(model_type="bpe", vocab_size=SPM_VOCAB, byte_fallback=True, character_coverage=1.0,
                    normalization_rule_name="identity", remove_extra_whitespaces=False, unk_id=0, bos_id=1, eos_id=2,
                    pad_id=-1, num_threads=1, minloglevel=2)
    settings.update(options)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus(seed)), model_writer=out, **settings)
    return out.getvalue()


def _added_token(content, special):
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
            "special": special}


def hub_tokenizer_files(with_image_token):
    """tokenizer_config / special_tokens_map / added_tokens dicts in the shape of the hub's ERNIE 4.5 files.

    `with_image_token` adds the `image_token` key transformers' PaddleOCRVLProcessor reads from the tokenizer;
    like any `*_token` key it then becomes a special token, and so a chat-template variable.
    """
    decoder = {str(i): _added_token(tok, True) for tok, i in TOKEN_IDS.items() if i < 3}
    decoder.update({str(TOKEN_IDS[tok]): _added_token(tok, special) for tok, special in ADDED})
    named = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<unk>",
             "cls_token": "<|begin_of_sentence|>", "sep_token": "<|end_of_sentence|>", "mask_token": "<mask:1>"}
    extra = [tok for tok, special in ADDED if special and tok not in named.values()]
    config = {"add_bos_token": False, "add_eos_token": False, "added_tokens_decoder": decoder,
              "additional_special_tokens": extra, "clean_up_tokenization_spaces": False, "legacy": True,
              "model_max_length": 131072, "tokenizer_class": "LlamaTokenizer", **named}
    if with_image_token:
        config["image_token"] = "<|IMAGE_PLACEHOLDER|>"
    special_map = {**named, "additional_special_tokens": extra}
    added = {tok: TOKEN_IDS[tok] for tok, _ in ADDED}
    return config, special_map, added


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)


def write_tokenizer(out_dir, kind, layout, seed):
    """Tokenizer files + chat template for `layout` ("transformers": chat_template.jinja and an `image_token`;
    "hub": template inside tokenizer_config.json, no `image_token`). kind "json" re-saves through transformers."""
    config, special_map, added = hub_tokenizer_files(with_image_token=layout == "transformers")
    if kind == "sentencepiece":
        with open(os.path.join(out_dir, "tokenizer.model"), "wb") as f:
            f.write(train_spm(seed))
        write_json(os.path.join(out_dir, "special_tokens_map.json"), special_map)
        write_json(os.path.join(out_dir, "added_tokens.json"), added)
    elif kind == "json":
        from transformers import TokenizersBackend

        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "tokenizer.model"), "wb") as f:
                f.write(train_spm(seed))
            write_json(os.path.join(tmp, "tokenizer_config.json"), config)
            TokenizersBackend.from_pretrained(tmp).save_pretrained(out_dir)
        with open(os.path.join(out_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
    else:
        raise ValueError(f"unknown tokenizer_kind {kind!r}")
    if layout == "hub":
        config["chat_template"] = HUB_CHAT_TEMPLATE
    else:
        with open(os.path.join(out_dir, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(HUB_CHAT_TEMPLATE)
    write_json(os.path.join(out_dir, "tokenizer_config.json"), config)
