"""HunyuanOCR checkpoint names -> ms_ocr names (ms_ocr keeps the hub's original names)."""

from ms_ocr.convert.table import RenameTable

# transformers' in-memory layout (its WeightRenaming for hunyuan_vl, reversed) back to the hub layout;
# applied in order, every matching rule (a key can need several).
RENAMES = [
    (r"^model\.vision_tower\.", "vit."),
    (r"^model\.language_model\.", "model."),
    (r"^vit\.patch_merger\.proj_conv\.", "vit.perceive.proj.0."),
    (r"^vit\.patch_merger\.proj_out\.", "vit.perceive.proj.2."),
    (r"^vit\.patch_merger\.", "vit.perceive."),
    (r"^(vit\.layers\.\d+)\.layer_norm1\.", r"\1.input_layernorm."),
    (r"^(vit\.layers\.\d+)\.layer_norm2\.", r"\1.post_attention_layernorm."),
    (r"^(vit\.layers\.\d+\.mlp)\.fc1\.", r"\1.dense_h_to_4h."),
    (r"^(vit\.layers\.\d+\.mlp)\.fc2\.", r"\1.dense_4h_to_h."),
]


def name_table(cfg):
    drops = []
    if cfg.text.tie_word_embeddings:
        # tied (resolve_tied_head): a stored lm_head.weight is a copy of embed_tokens
        drops.append(r"^lm_head\.weight$")
    return RenameTable(RENAMES, drops, chain=True)
