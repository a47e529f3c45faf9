"""PaddleOCR-VL config, read from a hub or transformers config.json (reference: transformers PaddleOCRVLConfig)."""

from dataclasses import dataclass, fields

from ms_ocr.config_utils import DecoderTextConfig, VisionTowerConfig, normalise_rope, pick, require_model_type

# Defaults of the reference config classes, used only where a hub file omits the field.
VISION_DEFAULTS = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                       num_channels=3, image_size=384, patch_size=14, hidden_act="gelu_pytorch_tanh",
                       layer_norm_eps=1e-6, spatial_merge_size=2, rope_theta=10000.0)
TEXT_DEFAULTS = dict(vocab_size=103424, hidden_size=1024, intermediate_size=3072, num_hidden_layers=18,
                     num_attention_heads=16, num_key_value_heads=2, hidden_act="silu",
                     max_position_embeddings=131072, rms_norm_eps=1e-5, use_bias=False, head_dim=128,
                     rope_theta=500000.0, mrope_section=[16, 24, 24], tie_word_embeddings=True,
                     eos_token_id=2, bos_token_id=1, pad_token_id=0)
ROOT_DEFAULTS = dict(image_token_id=100295, vision_start_token_id=101305, vision_end_token_id=101306)


@dataclass
class VisionConfig(VisionTowerConfig):
    image_size: int
    layer_norm_eps: float
    rope_theta: float


@dataclass
class TextConfig(DecoderTextConfig):
    use_bias: bool
    rope_theta: float
    mrope_section: list


@dataclass
class PaddleOCRVLConfig:
    vision: VisionConfig
    text: TextConfig
    image_token_id: int
    vision_start_token_id: int
    vision_end_token_id: int
    model_type: str = "paddleocr_vl"

    num_pos_axes = 3  # M-RoPE: (t, h, w) positions

    @classmethod
    def from_dict(cls, raw):
        require_model_type(raw, ("paddleocr_vl",), "paddleocr-vl")
        # Text fields sit under text_config (transformers) or flat at the root (the hub's original file).
        text_raw = dict(raw.get("text_config") or {})
        for key, value in raw.items():
            if key not in ("text_config", "vision_config") and key not in text_raw:
                text_raw[key] = value
        text_raw.update(normalise_rope(text_raw))
        if "head_dim" not in text_raw and "hidden_size" in text_raw and "num_attention_heads" in text_raw:
            text_raw["head_dim"] = text_raw["hidden_size"] // text_raw["num_attention_heads"]
        vision_raw = dict(raw.get("vision_config") or {})
        vision_raw.update(normalise_rope(vision_raw))
        # transformers 5.25's config asks for a tied head for the hub's flat layout whatever the flag says, and
        # for the nested layout when either level asks for it; mirror that. Its loader still loads a stored
        # lm_head that differs from the embeddings (the hub file's case): models/loading.resolve_tied_head.
        if raw.get("text_config") is None:
            text_raw["tie_word_embeddings"] = True
        else:
            text_raw["tie_word_embeddings"] = bool(raw.get("tie_word_embeddings", True)
                                                   or raw["text_config"].get("tie_word_embeddings", True))
        vision = VisionConfig(**pick(vision_raw, [f.name for f in fields(VisionConfig)], VISION_DEFAULTS, "vision_config"))
        text = TextConfig(**pick(text_raw, [f.name for f in fields(TextConfig)], TEXT_DEFAULTS, "text config"))
        if sum(text.mrope_section) * 2 != text.head_dim:
            raise ValueError(f"mrope_section {text.mrope_section} does not cover head_dim {text.head_dim}")
        root = pick(raw, list(ROOT_DEFAULTS), ROOT_DEFAULTS, "config")
        return cls(vision=vision, text=text, **root)
