"""PaddleOCR-VL checkpoint names -> ms_ocr names (ms_ocr keeps the hub's original names)."""

from ms_ocr.convert.table import RenameTable

# Keys present in the hub checkpoint that the reference ignores on load.
DROPS = [
    r"^visual\.vision_model\.embeddings\.packing_position_embedding\.",
    r"^visual\.vision_model\.head\.",
]

# transformers' in-memory layout (older save_pretrained output) back to the hub layout.
RENAMES = [
    (r"^model\.language_model\.", "model."),
    (r"^model\.visual\.", "visual."),
    (r"^model\.projector\.", "mlp_AR."),
]


def name_table(cfg):
    drops = list(DROPS)
    if cfg.text.tie_word_embeddings:
        # tied (resolve_tied_head): a stored lm_head.weight is a copy of embed_tokens
        drops.append(r"^lm_head\.weight$")
    return RenameTable(RENAMES, drops)
