"""DeepSeek-OCR (v1) checkpoint names -> ms_ocr names: vision parts under `vision.`, per-expert tensors
stacked; CLIP's own patch conv (unused: SAM features are its patch embeddings) and buffers are dropped."""

from ms_ocr.convert.table import EXPERT_STACKS, RenameTable

RENAMES = [(r"^model\.(sam_model|vision_model|projector|image_newline|view_seperator)", r"vision.\1")]
DROPS = [r"^model\.vision_model\.embeddings\.patch_embedding\.", r"^model\.vision_model\.embeddings\.position_ids$"]


def name_table(cfg):
    drops = DROPS + ([r"^lm_head\.weight$"] if cfg.text.tie_word_embeddings else [])
    return RenameTable(RENAMES, drops, stacks=EXPERT_STACKS)
