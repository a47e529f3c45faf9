"""Host-side code DeepSeek-OCR v1, v2 and Unlimited-OCR share: the MoE decoder's config (from a transformers
`text_config` or a DeepseekV2 `language_config`), the DeepEncoder-v1 config of v1 and Unlimited-OCR and which of
the two a checkpoint is, the choice of the tile grid, and where the image placeholders go in a prompt."""

from dataclasses import dataclass
from types import SimpleNamespace

from ms_ocr.config_utils import CheckpointError, pick

IMAGE_TOKEN = "<image>"

TEXT_DEFAULTS = dict(vocab_size=129280, hidden_size=1280, intermediate_size=6848, num_hidden_layers=12,
                     num_attention_heads=10, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=8192,
                     rms_norm_eps=1e-6, moe_intermediate_size=896, n_routed_experts=64, num_experts_per_tok=6,
                     n_shared_experts=2, routed_scaling_factor=1.0, rope_theta=10000.0, bos_token_id=0,
                     eos_token_id=1, tie_word_embeddings=False, topk_method="greedy", norm_topk_prob=False,
                     scoring_func="softmax", mlp_layer_types=None)

def rope_theta(raw, default):
    """The rope base; only plain rope is implemented, so a scaled one (yarn, linear, ...) fails by name."""
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        raise CheckpointError(f"rope type {kind!r} is not supported (DeepSeek-OCR uses plain rope)")
    return float(params.get("rope_theta", raw.get("rope_theta", default)))


def text_from(raw, where="text config"):
    """The MoE decoder config from a transformers `text_config` or a DeepseekV2 `language_config`."""
    raw = dict(raw)
    if raw.get("use_mla"):
        raise CheckpointError("multi-head latent attention (use_mla) is not used by DeepSeek-OCR and not supported")
    raw["rope_theta"] = rope_theta(raw, TEXT_DEFAULTS["rope_theta"])
    t = pick(raw, list(TEXT_DEFAULTS), TEXT_DEFAULTS, where)
    if t["num_key_value_heads"] is None:
        t["num_key_value_heads"] = t["num_attention_heads"]
    if t["mlp_layer_types"] is None:  # DeepseekV2: the first k layers dense, the rest MoE
        k = int(raw.get("first_k_dense_replace", 1))
        t["mlp_layer_types"] = ["dense"] * k + ["sparse"] * (t["num_hidden_layers"] - k)
    if t["topk_method"] != "greedy" or t["norm_topk_prob"] or t["scoring_func"] != "softmax":
        raise CheckpointError(f"unsupported MoE routing (topk_method={t['topk_method']}, norm_topk_prob="
                              f"{t['norm_topk_prob']}, scoring_func={t['scoring_func']})")
    t["head_dim"] = t["hidden_size"] // t["num_attention_heads"]
    t["sliding_window"] = None  # full causal attention; Unlimited-OCR's config sets its reference window
    return SimpleNamespace(**t)


SAM_DEFAULTS = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, image_size=1024, patch_size=16,
                    window_size=14, global_attn_indexes=[2, 5, 8, 11], output_channels=256, mlp_dim=None,
                    mlp_ratio=4.0, layer_norm_eps=1e-6)


def sam_from(raw, downsample):
    """SAM's sizes from a transformers `sam_config` (`downsample`: the model's default downsample_channels)."""
    defaults = dict(SAM_DEFAULTS, downsample_channels=downsample)
    sam = pick(raw, list(defaults), defaults, "sam config")
    mlp_dim = sam["mlp_dim"] or int(sam["hidden_size"] * sam["mlp_ratio"])
    return dict(dim=sam["hidden_size"], depth=sam["num_hidden_layers"], heads=sam["num_attention_heads"],
                mlp_dim=mlp_dim, patch=sam["patch_size"], image_size=sam["image_size"], window=sam["window_size"],
                global_layers=tuple(sam["global_attn_indexes"]), out_channels=sam["output_channels"],
                downsample=tuple(sam["downsample_channels"]), eps=sam["layer_norm_eps"])


# ---- DeepEncoder v1 (SAM-B + CLIP-L): DeepSeek-OCR v1 and Unlimited-OCR --------------------------------------------

IMAGE_TOKEN_ID = 128815
V1, UNLIMITED = "deepseek-ocr", "unlimited-ocr"
UNLIMITED_TYPES = ("unlimited-ocr", "unlimited_ocr")  # hub (remote code), transformers
UNLIMITED_ARCHS = ("UnlimitedOCRForCausalLM", "UnlimitedOcrForConditionalGeneration")
WINDOW_KEYS = ("sliding_window", "sliding_window_size")


def is_v1_vision(raw):
    """vision_config.width with sam_vit_b and a clip tower: DeepSeek-OCR v1's hub layout, and Unlimited-OCR's."""
    width = (raw.get("vision_config") or {}).get("width") or {}
    return "sam_vit_b" in width and any(k.startswith("clip") for k in width)


def _window_fields(raw):
    """Where a config states a sliding window (the top level, language_config or text_config)."""
    found = [k for k in WINDOW_KEYS if raw.get(k) is not None]
    for part in ("language_config", "text_config"):
        found += [f"{part}.{k}" for k in WINDOW_KEYS if (raw.get(part) or {}).get(k) is not None]
    return found


def deepencoder_v1_model(raw):
    """Which model a DeepEncoder-v1 config is: "deepseek-ocr" or "unlimited-ocr" (their --model names), told
    apart only by what names the model (model_type, architectures, auto_map) and by a sliding-window field; their
    towers, decoders and tensor names are the same. A config whose fields point both ways, or that has DeepSeek-OCR's
    layout and a sliding window but nothing naming the model, is a CheckpointError naming both."""
    archs = raw.get("architectures") or []
    maps = [str(v) for v in (raw.get("auto_map") or {}).values()]
    unlimited = [f"model_type {raw.get('model_type')!r}"] if raw.get("model_type") in UNLIMITED_TYPES else []
    unlimited += [f"architectures {a}" for a in archs if a in UNLIMITED_ARCHS]
    unlimited += [f"auto_map {m}" for m in maps if m.startswith("modeling_unlimitedocr.")]
    v1 = [f"architectures {a}" for a in archs if a == "DeepseekOCRForCausalLM"]
    v1 += [f"auto_map {m}" for m in maps if m.startswith("modeling_deepseekocr.")]
    window = _window_fields(raw)
    if unlimited and not v1:
        return UNLIMITED
    both = f"cannot tell {V1} from {UNLIMITED}"
    if unlimited:
        raise CheckpointError(f"config.json names both models ({', '.join(unlimited + v1)}): {both}")
    if raw.get("model_type") != "deepseek_vl_v2" or not is_v1_vision(raw):
        raise CheckpointError(f"config.json (model_type {raw.get('model_type')!r}) is neither {V1} nor {UNLIMITED}")
    if window:
        what = f"{', '.join(v1)} with a sliding window" if v1 else "no architectures naming the model"
        raise CheckpointError(f"config.json has DeepSeek-OCR's layout, {what} ({', '.join(window)}): {both}; "
                              f"name the model in config.json's architectures")
    return V1


@dataclass
class DeepEncoderV1Config:
    """The config of a DeepEncoder-v1 VLM (DeepSeek-OCR v1, Unlimited-OCR): the MoE decoder (`text`, its
    `sliding_window` None or the reference window), SAM and CLIP sizes."""
    text: SimpleNamespace
    sam: dict
    clip: dict
    image_token_id: int = IMAGE_TOKEN_ID

    num_pos_axes = 1  # 1-D positions

    @classmethod
    def from_hub(cls, raw):
        """The hub layout (remote code): `language_config` (DeepseekV2 keys), `vision_config.width` with
        `sam_vit_b` and `clip-l-14-224`, `projector_config`. Sizes the released file leaves out take the official
        code's constants (SAM window 14, neck 256 channels, MLP ratio 4; CLIP eps 1e-5, MLP ratio 4)."""
        if "language_config" not in raw:
            raise CheckpointError("config lacks language_config")
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


def closest_grid(width, height, tile, grids):
    """The (columns, rows) of `grids` whose aspect ratio is closest to the image's; on an exact tie a later
    candidate wins while the image area exceeds half of its tiled area (DeepSeek-OCR v1 and v2 alike)."""
    aspect, area = width / height, width * height
    best, best_diff = (1, 1), float("inf")
    for grid in grids:
        diff = abs(aspect - grid[0] / grid[1])
        if diff < best_diff:
            best, best_diff = grid, diff
        elif diff == best_diff and area > 0.5 * tile * tile * grid[0] * grid[1]:
            best = grid
    return best


def place_images(prompt, count, sep="\n"):
    """The prompt text with one IMAGE_TOKEN per image: as given when the prompt places them itself (e.g. the
    documented "<image>\\nFree OCR."), else IMAGE_TOKEN + `sep` per image before it. A prompt whose placeholders
    do not match the images is an error (the text after an unmatched placeholder would otherwise be lost)."""
    placed = prompt.count(IMAGE_TOKEN)
    if placed == 0:
        return (IMAGE_TOKEN + sep) * count + prompt
    if placed != count:
        raise ValueError(f"the prompt has {placed} {IMAGE_TOKEN} placeholder(s) for {count} image(s): give one per "
                         f"image, or none to put them before the prompt")
    return prompt
