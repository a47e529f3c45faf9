"""Checkpoint tokenizer matching transformers 5.x `AutoTokenizer` (the TokenizersBackend it picks for our models).

`tokenizer.json` runs through the `tokenizers` library as saved; a bare sentencepiece `tokenizer.model` goes
through `SentencePieceBackend`. Special and added tokens are resolved from tokenizer_config.json,
special_tokens_map.json and added_tokens.json with transformers' precedence (see `read_token_config`).
"""

import os

from tokenizers import AddedToken
from tokenizers import Tokenizer as _FastTokenizer

from ms_ocr.config_utils import CheckpointError, read_json
from ms_ocr.processing.spm_backend import SentencePieceBackend

NAMED_SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _content(value):
    """A token given as a string or as a serialised AddedToken dict."""
    return value.get("content") if isinstance(value, dict) else value


def _read_optional(model_dir, name):
    path = os.path.join(model_dir, name)
    return read_json(path) if os.path.isfile(path) else None


def _model_specific(config):
    """String `*_token` entries other than the standard seven (`image_token`, `sys_start_token`, ...)."""
    return {k: v for k, v in config.items() if k not in NAMED_SPECIAL and k.endswith("_token") and isinstance(v, str)}


def read_token_config(model_dir):
    """Resolve special and added tokens the way PreTrainedTokenizerBase.from_pretrained does.

    Returns (config, named, extras, fallback_extras, added): `named` maps attribute -> token for the standard
    specials plus every other string `*_token` key (e.g. `image_token`; these are chat-template variables),
    `extras` is the extra-special list or None when the folder names none (the backend then supplies one, with
    `fallback_extras` from special_tokens_map.json's `additional_special_tokens`), `added` is
    [(id, content, special)] by id. `added_tokens_decoder` in tokenizer_config.json wins; without it
    special_tokens_map.json overrides the config and added_tokens.json lists the added tokens.
    """
    config = dict(_read_optional(model_dir, "tokenizer_config.json") or {})
    if "additional_special_tokens" in config and not config.get("extra_special_tokens"):
        config["extra_special_tokens"] = config.pop("additional_special_tokens")
    explicit = _model_specific(config)
    if isinstance(config.get("extra_special_tokens"), dict):
        explicit.update(config.pop("extra_special_tokens"))
    added = {}
    if "added_tokens_decoder" in config:
        for idx, token in config["added_tokens_decoder"].items():
            added[int(idx)] = (_content(token), isinstance(token, dict) and bool(token.get("special", False)))
    else:
        for key, value in (_read_optional(model_dir, "special_tokens_map.json") or {}).items():
            if key == "extra_special_tokens" and isinstance(value, list):
                merged = [_content(t) for t in config.get("extra_special_tokens") or []]
                config[key] = merged + [_content(t) for t in value if _content(t) not in merged]
            elif key == "extra_special_tokens" and isinstance(value, dict):
                explicit.update(value)
            else:
                config[key] = value
    auto = _model_specific(config)  # keys special_tokens_map.json brought in; transformers lists them first
    named = {key: _content(config[key]) for key in NAMED_SPECIAL if _content(config.get(key)) is not None}
    named.update({k: _content(v) for k, v in {**auto, **explicit}.items()})
    extras = [_content(t) for t in config["extra_special_tokens"]] if "extra_special_tokens" in config else None
    fallback = [_content(t) for t in config.get("additional_special_tokens") or []]
    if "added_tokens_decoder" not in config:
        specials = set(named.values()) | set(extras or [])
        for content, idx in (_read_optional(model_dir, "added_tokens.json") or {}).items():
            added[int(idx)] = (content, content in specials)
    return config, named, extras, fallback, [(i, *added[i]) for i in sorted(added)]


class _JsonBackend:
    def __init__(self, path):
        try:
            self.fast = _FastTokenizer.from_file(path)
        except Exception as e:  # noqa: BLE001 - the tokenizers library raises a bare Exception
            detail = " ".join(str(e).split()) or type(e).__name__
            raise CheckpointError(f"{path} is not a readable tokenizer file ({detail})") from None
        self._added = {t.content: t.special for t in self.fast.get_added_tokens_decoder().values()}

    def __len__(self):
        return self.fast.get_vocab_size(with_added_tokens=True)

    def add_token(self, content, special, token_id=None):
        # Ids come from tokenizer.json; a token it lacks gets the next free id, as transformers' add_tokens does.
        if content not in self._added:
            self.fast.add_tokens([AddedToken(content, special=special, normalized=False)])
        if special and not self._added.get(content, False):  # transformers' _post_init re-adds specials as special
            self.fast.add_special_tokens([AddedToken(content, special=True, normalized=False)])
        self._added[content] = special or self._added.get(content, False)

    def token_to_id(self, token):
        return self.fast.token_to_id(token)

    def id_to_token(self, token_id):
        return self.fast.id_to_token(token_id)

    def encode(self, text, post_process=False):
        return self.fast.encode(text, add_special_tokens=post_process).ids

    def decode(self, ids, skip_special_tokens):
        return self.fast.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)


class Tokenizer:
    """encode/decode for one checkpoint; `special_tokens` are the named specials passed to chat templates."""

    def __init__(self, backend, special_tokens, extra_special_tokens, affixes):
        self._backend = backend
        self.special_tokens = dict(special_tokens)
        self.extra_special_tokens = list(extra_special_tokens)
        self._affixes = affixes  # (prefix ids, suffix ids), or None to keep tokenizer.json's post-processor

    @classmethod
    def from_dir(cls, model_dir):
        """Load from a checkpoint folder: tokenizer.json if present, else sentencepiece tokenizer.model."""
        json_path = os.path.join(model_dir, "tokenizer.json")
        spm_path = os.path.join(model_dir, "tokenizer.model")
        is_spm = not os.path.isfile(json_path)
        if is_spm and not os.path.isfile(spm_path):
            raise CheckpointError(f"no tokenizer.json or tokenizer.model in {model_dir}")
        config, named, extras, fallback, added = read_token_config(model_dir)
        if is_spm:  # transformers' conversion reads `legacy` from the tokenizer config (default true)
            backend = SentencePieceBackend(spm_path, legacy=config.get("legacy", True))
        else:
            backend = _JsonBackend(json_path)
        if extras is None:
            # transformers' sentencepiece conversion supplies the model's control pieces here
            extras = list(backend.proto_added) if is_spm else fallback
        for token_id, content, special in added:
            backend.add_token(content, special, token_id)
        for content in [*named.values(), *extras]:
            backend.add_token(content, True)
        affixes = None  # tokenizer.json's own post-processor decides: transformers ignores add_bos/eos_token then
        if is_spm:
            bos, eos = named.get("bos_token"), named.get("eos_token")
            affixes = ([backend.token_to_id(bos)] if config.get("add_bos_token") and bos else [],
                       [backend.token_to_id(eos)] if config.get("add_eos_token") and eos else [])
        return cls(backend, named, extras, affixes)

    def __len__(self):
        return len(self._backend)

    def encode(self, text, add_special_tokens=True):
        """Token ids of `text`; BOS/EOS exactly when transformers' tokenizer(text, add_special_tokens=...) adds them."""
        if self._affixes is None:
            return list(self._backend.encode(text, post_process=add_special_tokens))
        prefix, suffix = self._affixes if add_special_tokens else ([], [])
        return [*prefix, *self._backend.encode(text), *suffix]

    def decode(self, ids, skip_special_tokens=True):
        """Text of `ids` (no clean-up of tokenization spaces); unknown ids are dropped like `tokenizers` does."""
        return self._backend.decode(ids, skip_special_tokens)

    def token_to_id(self, token):
        return self._backend.token_to_id(token)

    def id_to_token(self, token_id):
        return self._backend.id_to_token(int(token_id))

    @property
    def all_special_tokens(self):
        """Named specials in transformers' attribute order, then the extra specials, without repeats."""
        return list(dict.fromkeys([*self.special_tokens.values(), *self.extra_special_tokens]))

    @property
    def all_special_ids(self):
        return [self.token_to_id(t) for t in self.all_special_tokens]

    @property
    def eos_token_id(self):
        eos = self.special_tokens.get("eos_token")
        return None if eos is None else self.token_to_id(eos)
