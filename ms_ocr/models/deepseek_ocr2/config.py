"""DeepSeek-OCR-2 config in both published layouts (reference: transformers DeepseekOcr2Config):
- transformers / deepseek-community: `text_config`, `vision_config.{sam_config, encoder_config}`;
- deepseek-ai remote code: `language_config` (DeepseekV2 keys: first_k_dense_replace, ...),
  `vision_config.width.sam_vit_b` (SAM sizes), `projector_config`; the query encoder is Qwen2-0.5B-shaped.
The MoE text part (`text_from`, ms_ocr/processing/deepseek.py) is shared with DeepSeek-OCR v1.
"""

from dataclasses import dataclass
from types import SimpleNamespace

from ms_ocr.config_utils import CheckpointError, pick, require_model_type
from ms_ocr.processing.deepseek import UNLIMITED_TYPES, rope_theta, sam_from, text_from

ENCODER_DEFAULTS = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                        num_key_value_heads=2, rms_norm_eps=1e-6, hidden_act="silu", rope_theta=1000000.0)


@dataclass
class DeepseekOCR2Config:
    text: SimpleNamespace
    sam: dict
    encoder: SimpleNamespace
    image_token_id: int
    layout: str = "transformers"

    num_pos_axes = 1  # 1-D positions

    @classmethod
    def from_dict(cls, raw):
        if raw.get("model_type") in UNLIMITED_TYPES:
            raise CheckpointError("an Unlimited-OCR checkpoint, not DeepSeek-OCR-2: use --model unlimited-ocr")
        require_model_type(raw, ("deepseek_ocr2", "deepseek_vl_v2"), "deepseek-ocr2")
        vision = raw.get("vision_config") or {}
        if "language_config" in raw:  # deepseek-ai remote-code layout
            layout = "deepseek-ai"
            text = text_from(raw["language_config"], "language_config")
            width = vision.get("width") or {}
            if "sam_vit_b" not in width or not any("qwen2" in k for k in width):
                raise CheckpointError("vision_config.width has no sam_vit_b + qwen2 encoder: not a DeepSeek-OCR-2 "
                                      "checkpoint (DeepSeek-OCR v1 has clip-l-14-224: use --model deepseek-ocr)")
            sam_w = width["sam_vit_b"]
            sam_raw = dict(hidden_size=sam_w.get("width", 768), num_hidden_layers=sam_w.get("layers", 12),
                           num_attention_heads=sam_w.get("heads", 12),
                           global_attn_indexes=sam_w.get("global_attn_indexes", [2, 5, 8, 11]),
                           downsample_channels=sam_w.get("downsample_channels", [512, 896]))
            enc_w = next(v for k, v in width.items() if "qwen2" in k)
            enc_raw = dict(hidden_size=enc_w.get("dim", enc_w.get("width", 896)))
            image_token_id = raw.get("image_token_id", 128815)
        else:
            layout = "transformers"
            text = text_from(raw.get("text_config") or {})
            # transformers ties lm_head by the root flag (DeepseekOcr2Config.tie_word_embeddings, default False);
            # the text config's own flag is not read
            text.tie_word_embeddings = bool(raw.get("tie_word_embeddings", False))
            sam_raw = vision.get("sam_config") or {}
            enc_raw = dict(vision.get("encoder_config") or {})
            enc_raw["rope_theta"] = rope_theta(enc_raw, ENCODER_DEFAULTS["rope_theta"])
            image_token_id = raw.get("image_token_id", 128815)
        sam = sam_from(sam_raw, [512, 896])
        encoder = SimpleNamespace(**pick(enc_raw, list(ENCODER_DEFAULTS), ENCODER_DEFAULTS, "encoder config"))
        if sam["downsample"][1] != encoder.hidden_size:
            raise CheckpointError(f"SAM output channels {sam['downsample'][1]} != encoder width {encoder.hidden_size}")
        return cls(text=text, sam=sam, encoder=encoder, image_token_id=int(image_token_id), layout=layout)
