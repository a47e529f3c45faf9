"""DeepSeek-OCR (v1) config as the hub ships it: model_type `deepseek_vl_v2` (shared with the unrelated
DeepSeek-VL2) recognised by its content — `vision_config.width` with `sam_vit_b` and `clip-l-14-224` —
plus `language_config` (DeepseekV2 MoE keys) and `projector_config`. Sizes the released file leaves out take
the official code's constants (SAM window 14, neck 256 channels, MLP ratio 4; CLIP eps 1e-5, MLP ratio 4)."""

from dataclasses import dataclass
from types import SimpleNamespace

from ms_ocr.config_utils import CheckpointError, require_model_type
from ms_ocr.processing.deepseek import text_from

IMAGE_TOKEN_ID = 128815


def is_v1(raw):
    width = (raw.get("vision_config") or {}).get("width") or {}
    return "sam_vit_b" in width and any(k.startswith("clip") for k in width)


@dataclass
class DeepseekOCRConfig:
    text: SimpleNamespace
    sam: dict
    clip: dict
    image_token_id: int = IMAGE_TOKEN_ID

    num_pos_axes = 1  # 1-D positions

    @classmethod
    def from_dict(cls, raw):
        require_model_type(raw, ("deepseek_vl_v2",), "deepseek-ocr")
        if not is_v1(raw):
            raise CheckpointError("config has model_type deepseek_vl_v2 but no sam_vit_b + clip-l vision towers: "
                                  "not a DeepSeek-OCR checkpoint (DeepSeek-VL2 and DeepSeek-OCR-2 differ)")
        if "language_config" not in raw:
            raise CheckpointError("DeepSeek-OCR config lacks language_config")
        text = text_from(raw["language_config"], "language_config")
        vision = raw["vision_config"]
        width = vision["width"]
        s = width["sam_vit_b"]
        c = next(v for k, v in width.items() if k.startswith("clip"))
        dim = s.get("width", 768)
        sam = dict(dim=dim, depth=s.get("layers", 12), heads=s.get("heads", 12),
                   mlp_dim=int(dim * s.get("mlp_ratio", 4)), patch=s.get("patch_size", 16),
                   image_size=s.get("image_size", vision.get("image_size", 1024)), window=s.get("window_size", 14),
                   global_layers=tuple(s.get("global_attn_indexes", (2, 5, 8, 11))),
                   out_channels=s.get("out_chans", 256), downsample=tuple(s.get("downsample_channels", (512, 1024))),
                   eps=1e-6)
        cw = c.get("width", 1024)
        clip = dict(dim=cw, heads=c.get("heads", 16), ffn=int(cw * c.get("mlp_ratio", 4)), layers=c.get("layers", 24),
                    image_size=c.get("image_size", 224), patch=c.get("patch_size", 14), eps=1e-5)
        proj = raw.get("projector_config") or {}
        if proj.get("projector_type", "linear") != "linear":
            raise CheckpointError(f"unsupported projector_type {proj.get('projector_type')!r}")
        if proj.get("n_embed", text.hidden_size) != text.hidden_size:
            raise CheckpointError("projector n_embed differs from the language hidden size")
        if proj.get("input_dim", sam["downsample"][1] + cw) != sam["downsample"][1] + cw:
            raise CheckpointError("projector input_dim differs from SAM + CLIP widths")
        return cls(text=text, sam=sam, clip=clip, image_token_id=int(raw.get("image_token_id", IMAGE_TOKEN_ID)))
