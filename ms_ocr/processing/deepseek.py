"""Host-side code DeepSeek-OCR v1 and v2 share: the MoE decoder's config (from a transformers `text_config` or a
DeepseekV2 `language_config`), the choice of the tile grid, and where the image placeholders go in a prompt."""

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
    return SimpleNamespace(**t)


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


def place_images(prompt, count):
    """The prompt text with one IMAGE_TOKEN per image: as given when the prompt places them itself (e.g. the
    documented "<image>\\nFree OCR."), else "<image>\\n" per image before it. A prompt whose placeholders do not
    match the images is an error (the text after an unmatched placeholder would otherwise be lost)."""
    placed = prompt.count(IMAGE_TOKEN)
    if placed == 0:
        return (IMAGE_TOKEN + "\n") * count + prompt
    if placed != count:
        raise ValueError(f"the prompt has {placed} {IMAGE_TOKEN} placeholder(s) for {count} image(s): give one per "
                         f"image, or none to put them before the prompt")
    return prompt
