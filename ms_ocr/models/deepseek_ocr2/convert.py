"""DeepSeek-OCR-2 checkpoint names -> ms_ocr names: the vision parts move under `vision.`, per-expert
tensors stack into [E, ...] Parameters; everything else keeps the hub's name."""

from ms_ocr.convert.table import EXPERT_STACKS, RenameTable

RENAMES = [(r"^model\.(sam_model|qwen2_model|projector|view_seperator)", r"vision.\1")]


def name_table(cfg):
    drops = [r"^lm_head\.weight$"] if cfg.text.tie_word_embeddings else []
    return RenameTable(RENAMES, drops, stacks=EXPERT_STACKS)
