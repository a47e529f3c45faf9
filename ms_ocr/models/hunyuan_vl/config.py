"""HunyuanOCR config, read from a hub or transformers config.json (reference: transformers HunYuanVLConfig).

Layouts: the hub's original file (text fields flat at the root, `rope_scaling` with type "xdrope", `alpha`
and `xdrope_section`, legacy aliases `attention_head_dim` / `org_vocab_size` / `pad_id`) and transformers'
(nested `text_config` with `rope_parameters` and `mrope_section`).
"""

from dataclasses import dataclass, fields

from ms_ocr.config_utils import CheckpointError, DecoderTextConfig, VisionTowerConfig, pick, require_model_type

# Defaults of the reference config classes, used only where a file omits the field.
VISION_DEFAULTS = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                       num_channels=3, patch_size=16, spatial_merge_size=2, max_image_size=2048,
                       rms_norm_eps=1e-5, hidden_act="gelu", interpolate_mode="bilinear")
TEXT_DEFAULTS = dict(vocab_size=290943, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
                     max_position_embeddings=2048, rms_norm_eps=1e-5, attention_bias=False, head_dim=None,
                     tie_word_embeddings=True, eos_token_id=2, bos_token_id=1, pad_token_id=0)
ROOT_DEFAULTS = dict(image_token_id=120120, im_start_id=120118, im_end_id=120119, im_newline_id=120121)
# The hub file names the image ids image_start_token_id / ...; transformers writes im_start_id / ...
ROOT_ALIASES = {"image_start_token_id": "im_start_id", "image_end_token_id": "im_end_id",
                "image_newline_token_id": "im_newline_id"}
# Legacy names some Tencent files use (transformers' attribute_map: the legacy key wins, e.g. the hub's
# pad_id 120002 over its pad_token_id -1).
TEXT_ALIASES = {"attention_head_dim": "head_dim", "org_vocab_size": "vocab_size", "pad_id": "pad_token_id"}
VISION_ALIASES = {"layer_norm_eps": "rms_norm_eps", "attention_heads": "num_attention_heads"}


@dataclass
class VisionConfig(VisionTowerConfig):
    max_image_size: int
    rms_norm_eps: float
    interpolate_mode: str


@dataclass
class TextConfig(DecoderTextConfig):
    attention_bias: bool
    rope_theta: float = 10000.0
    rope_alpha: float = None
    xdrope_section: list = None

    @property
    def rope_base(self):
        """The fixed NTK-alpha base theta * alpha^(d / (d - 2)) (HF "ntk_alpha"; no sequence-length term)."""
        if not self.rope_alpha:
            return float(self.rope_theta)
        return float(self.rope_theta) * float(self.rope_alpha) ** (self.head_dim / (self.head_dim - 2))


def _with_aliases(raw, aliases, legacy_wins=True):
    out = dict(raw)
    for old, new in aliases.items():
        if old in out:
            value = out.pop(old)
            if legacy_wins or out.get(new) is None:
                out[new] = value
    return out


def _rope(raw):
    """rope_parameters (transformers) or rope_scaling + rope_theta (hub) -> theta, alpha, sections."""
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise CheckpointError(f"rope settings must be a mapping, got {params!r}")
    kind = params.get("rope_type", params.get("type", "default"))
    sections = params.get("mrope_section")
    legacy = params.get("xdrope_section")
    if sections is not None and legacy is not None and [int(v) for v in sections] != [int(v) for v in legacy]:
        raise CheckpointError(f"rope mrope_section {sections} and xdrope_section {legacy} differ")
    sections = sections if sections is not None else legacy
    if sections is None:
        raise CheckpointError("config has no xdrope_section / mrope_section: not a HunyuanOCR text config")
    alpha = params.get("alpha")
    if kind not in ("xdrope", "dynamic", "default") or (kind == "dynamic" and not alpha
                                                        and params.get("factor", 1.0) != 1.0):
        raise CheckpointError(f"unsupported rope type {kind!r} for HunyuanOCR (xdrope / dynamic with alpha)")
    theta = params.get("rope_theta", raw.get("rope_theta", 10000.0))
    return dict(rope_theta=float(theta), rope_alpha=float(alpha) if alpha else None,
                xdrope_section=[int(v) for v in sections])


@dataclass
class HunyuanOCRConfig:
    vision: VisionConfig
    text: TextConfig
    image_token_id: int
    im_start_id: int
    im_end_id: int
    im_newline_id: int
    model_type: str = "hunyuan_vl"
    flat_layout: bool = False  # the hub's original (v1.0) file

    @property
    def num_pos_axes(self):  # XD-RoPE: one position axis per xdrope section
        return len(self.text.xdrope_section)

    @classmethod
    def from_dict(cls, raw):
        require_model_type(raw, ("hunyuan_vl",), "hunyuan-ocr")
        nested = raw.get("text_config") is not None
        text_raw = dict(raw["text_config"]) if nested else {
            k: v for k, v in raw.items() if k not in ("vision_config", *ROOT_DEFAULTS, *ROOT_ALIASES)}
        text_raw = _with_aliases(text_raw, TEXT_ALIASES)
        text_raw.update(_rope(text_raw))
        if text_raw.get("num_key_value_heads") is None and "num_attention_heads" in text_raw:
            text_raw["num_key_value_heads"] = text_raw["num_attention_heads"]
        if text_raw.get("head_dim") is None and "hidden_size" in text_raw and "num_attention_heads" in text_raw:
            text_raw["head_dim"] = text_raw["hidden_size"] // text_raw["num_attention_heads"]
        # transformers 5.25 ties lm_head to embed_tokens for the flat layout whatever the flag says (the flag
        # moves into the text config and the root keeps its default True), and for the nested layout when
        # either level asks for it; mirror that (a stored lm_head that differs still wins at load:
        # models/loading.resolve_tied_head).
        if nested:
            text_raw["tie_word_embeddings"] = bool(raw.get("tie_word_embeddings", True)
                                                   or raw["text_config"].get("tie_word_embeddings", True))
        else:
            text_raw["tie_word_embeddings"] = True
        names = [f.name for f in fields(TextConfig)]
        text = TextConfig(**pick(text_raw, names, TEXT_DEFAULTS, "text config"))
        vision_raw = _with_aliases(raw.get("vision_config") or {}, VISION_ALIASES)
        vision = VisionConfig(**pick(vision_raw, [f.name for f in fields(VisionConfig)], VISION_DEFAULTS,
                                     "vision_config"))
        if vision.interpolate_mode != "bilinear":
            raise CheckpointError(f"unsupported vision interpolate_mode {vision.interpolate_mode!r}")
        if sum(text.xdrope_section) * 2 != text.head_dim:
            raise CheckpointError(f"xdrope_section {text.xdrope_section} does not cover head_dim {text.head_dim}")
        if len(text.xdrope_section) < 3:
            raise CheckpointError(f"HunyuanOCR needs at least 3 rope axes, got xdrope_section {text.xdrope_section}")
        root = pick(_with_aliases(raw, ROOT_ALIASES, legacy_wins=False), list(ROOT_DEFAULTS), ROOT_DEFAULTS, "config")
        return cls(vision=vision, text=text, flat_layout=not nested, **root)
