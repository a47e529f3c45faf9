"""Unlimited-OCR config in both layouts (reference: transformers 5.25 UnlimitedOcrConfig):
- hub (remote code): model_type `unlimited-ocr`, DeepSeek-OCR v1's `language_config` / `vision_config.width` /
  `projector_config`, the window at the top level (`sliding_window`, else `sliding_window_size` at the top level or
  in language_config, else 128);
- transformers save_pretrained: model_type `unlimited_ocr`, `text_config` (its `sliding_window`, default 128),
  `vision_config.{sam_config, encoder_config}`, the head's tie flag at the root.
Which model a DeepEncoder-v1 config is: processing/deepseek.py deepencoder_v1_model."""

from ms_ocr.config_utils import CheckpointError, pick
from ms_ocr.processing.deepseek import (IMAGE_TOKEN_ID, UNLIMITED, DeepEncoderV1Config, deepencoder_v1_model,
                                        sam_from, text_from)

WINDOW = 128  # UnlimitedOcrTextConfig.sliding_window
MAX_POSITIONS = 32768  # its max_position_embeddings
CLIP_DEFAULTS = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                     image_size=224, patch_size=14, layer_norm_eps=1e-5, hidden_act="quick_gelu")
WINDOWED = "reference_sliding_attention"


def _window(value, where):
    if value is None or int(value) < 1:
        raise CheckpointError(f"{where} is {value!r}: Unlimited-OCR needs a sliding window of at least 1 token")
    return int(value)


class UnlimitedOCRConfig(DeepEncoderV1Config):
    @classmethod
    def from_dict(cls, raw):
        if deepencoder_v1_model(raw) != UNLIMITED:
            raise CheckpointError("a DeepSeek-OCR v1 checkpoint (full attention), not Unlimited-OCR: use "
                                  "--model deepseek-ocr")
        if "text_config" in raw:
            return cls._saved(raw)
        lang = raw["language_config"]
        cfg = cls.from_hub(raw)
        if "max_position_embeddings" not in lang:
            cfg.text.max_position_embeddings = MAX_POSITIONS
        # the window as transformers reads a hub config (the top-level sliding_window), then as the remote code
        for where, value in (("sliding_window", raw.get("sliding_window")),
                             ("sliding_window_size", raw.get("sliding_window_size")),
                             ("language_config.sliding_window_size", lang.get("sliding_window_size")),
                             ("the default", WINDOW)):
            if value is not None:
                cfg.text.sliding_window = _window(value, where)
                return cfg

    @classmethod
    def _saved(cls, raw):
        t = dict(raw["text_config"])
        t.setdefault("max_position_embeddings", MAX_POSITIONS)
        text = text_from(t)
        text.tie_word_embeddings = bool(raw.get("tie_word_embeddings", False))  # the root flag, as transformers
        kinds = set(t.get("layer_types") or [WINDOWED])
        if kinds != {WINDOWED}:
            raise CheckpointError(f"text_config.layer_types {sorted(kinds)}: only {WINDOWED} layers are supported")
        text.sliding_window = _window(t.get("sliding_window", WINDOW), "text_config.sliding_window")
        vision = raw.get("vision_config") or {}
        sam = sam_from(vision.get("sam_config") or {}, [512, 1024])
        c = pick(vision.get("encoder_config") or {}, list(CLIP_DEFAULTS), CLIP_DEFAULTS, "encoder config")
        if c["hidden_act"] != "quick_gelu":
            raise CheckpointError(f"encoder hidden_act {c['hidden_act']!r}: only quick_gelu is supported")
        if c["hidden_size"] != sam["downsample"][1]:
            raise CheckpointError(f"SAM output channels {sam['downsample'][1]} != CLIP width {c['hidden_size']}")
        clip = dict(dim=c["hidden_size"], heads=c["num_attention_heads"], ffn=c["intermediate_size"],
                    layers=c["num_hidden_layers"], image_size=c["image_size"], patch=c["patch_size"],
                    eps=c["layer_norm_eps"])
        return cls(text=text, sam=sam, clip=clip, image_token_id=int(raw.get("image_token_id", IMAGE_TOKEN_ID)))
