"""A tiny sentencepiece BPE tokenizer carrying PaddleOCR-VL's (ERNIE 4.5) special tokens, for test checkpoints.

The base model is trained in-process on a synthetic English corpus; the special tokens sit right after it,
as added tokens, so every id stays below the tiny model's vocab_size.
"""

import io
import json
import os
import random
import shutil
import tempfile

import sentencepiece as spm

SPM_VOCAB = 384  # 3 control pieces + 256 byte-fallback pieces + characters and a few merges
VOCAB_SIZE = 400

# (content, special) in id order from SPM_VOCAB; `<|LOC_*|>` stand in for ERNIE's non-special added tokens.
ADDED = [("<|begin_of_sentence|>", True), ("<|end_of_sentence|>", True), ("<|IMAGE_PLACEHOLDER|>", True),
         ("<|IMAGE_START|>", True), ("<|IMAGE_END|>", True), ("<|VIDEO_PLACEHOLDER|>", True), ("<mask:1>", True),
         ("<|LOC_0|>", False), ("<|LOC_1|>", False)]
TOKEN_IDS = {"<unk>": 0, "<s>": 1, "</s>": 2, **{tok: SPM_VOCAB + i for i, (tok, _) in enumerate(ADDED)}}

HUB_CHAT_TEMPLATE = """{%- if not add_generation_prompt is defined -%}
    {%- set add_generation_prompt = true -%}
{%- endif -%}
{%- if not cls_token is defined -%}
    {%- set cls_token = "<|begin_of_sentence|>" -%}
{%- endif -%}
{%- if not eos_token is defined -%}
    {%- set eos_token = "</s>" -%}
{%- endif -%}
{%- if not image_token is defined -%}
    {%- set image_token = "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>" -%}
{%- endif -%}
{{- cls_token -}}
{%- for message in messages -%}
    {%- if message["role"] == "user" -%}
        {{- "User: " -}}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "image" -%}
                {{ image_token }}
            {%- endif -%}
        {%- endfor -%}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] }}
            {%- endif -%}
        {%- endfor -%}
        {{ "\\n" -}}
    {%- elif message["role"] == "assistant" -%}
        {{- "Assistant: " -}}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] }}
            {%- endif -%}
        {%- endfor -%}
        {{ eos_token -}}
    {%- elif message["role"] == "system" -%}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] + "\\n" }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "Assistant: " -}}
{%- endif -%}
"""

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


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)


def write_tokenizer(out_dir, kind, layout, seed):
    """Tokenizer files + chat template for `layout` ("transformers": chat_template.jinja and an `image_token`;
    "hub": template inside tokenizer_config.json, no `image_token`). kind "json" re-saves through transformers."""
    config, special_map, added = hub_tokenizer_files(with_image_token=layout == "transformers")
    if kind == "sentencepiece":
        with open(os.path.join(out_dir, "tokenizer.model"), "wb") as f:
            f.write(train_spm(seed))
        _write_json(os.path.join(out_dir, "special_tokens_map.json"), special_map)
        _write_json(os.path.join(out_dir, "added_tokens.json"), added)
    elif kind == "json":
        from transformers import TokenizersBackend

        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "tokenizer.model"), "wb") as f:
                f.write(train_spm(seed))
            _write_json(os.path.join(tmp, "tokenizer_config.json"), config)
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
    _write_json(os.path.join(out_dir, "tokenizer_config.json"), config)


def copy_tokenizer(src, dst, **config_updates):
    """Copy a fixture's tokenizer files to `dst`, overriding tokenizer_config keys (None deletes a key)."""
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name.startswith(("tokenizer", "special_tokens", "added_tokens", "chat_template", "config.json")):
            shutil.copy(os.path.join(src, name), dst)
    path = os.path.join(dst, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    for key, value in config_updates.items():
        config.pop(key, None) if value is None else config.__setitem__(key, value)
    _write_json(path, config)
    return dst
