"""Test-only companion of the tiny sentencepiece tokenizer (bench/tiny_tokenizer.py writes it, bench/paddle_tokens.py
holds its special token ids): copying a fixture's tokenizer files with changed settings."""

import json
import os
import shutil

from bench.tiny_tokenizer import write_json


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
    write_json(path, config)
    return dst
