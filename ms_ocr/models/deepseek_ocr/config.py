"""DeepSeek-OCR (v1) config as the hub ships it: model_type `deepseek_vl_v2` (shared with the unrelated
DeepSeek-VL2) recognised by its content — `vision_config.width` with `sam_vit_b` and `clip-l-14-224` —
plus `language_config` (DeepseekV2 MoE keys) and `projector_config` (read by processing/deepseek.py, shared with
Unlimited-OCR, whose hub files have the same layout: deepencoder_v1_model tells them apart)."""

from ms_ocr.config_utils import CheckpointError, require_model_type
from ms_ocr.processing.deepseek import (UNLIMITED, UNLIMITED_TYPES, DeepEncoderV1Config, deepencoder_v1_model,
                                        is_v1_vision)


class DeepseekOCRConfig(DeepEncoderV1Config):
    @classmethod
    def from_dict(cls, raw):
        if raw.get("model_type") not in UNLIMITED_TYPES:
            require_model_type(raw, ("deepseek_vl_v2",), "deepseek-ocr")
        if raw.get("model_type") == "deepseek_vl_v2" and not is_v1_vision(raw):
            raise CheckpointError("config has model_type deepseek_vl_v2 but no sam_vit_b + clip-l vision towers: "
                                  "not a DeepSeek-OCR checkpoint (DeepSeek-VL2 and DeepSeek-OCR-2 differ)")
        if deepencoder_v1_model(raw) == UNLIMITED:
            raise CheckpointError(f"an Unlimited-OCR checkpoint (sliding-window attention), not DeepSeek-OCR: use "
                                  f"--model {UNLIMITED}")
        return cls.from_hub(raw)
