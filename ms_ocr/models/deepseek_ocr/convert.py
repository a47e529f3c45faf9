"""DeepSeek-OCR (v1) checkpoint names -> ms_ocr names: the DeepEncoder-v1 table (ms_ocr/convert/table.py)."""

from ms_ocr.convert.table import deepencoder_v1_table


def name_table(cfg):
    return deepencoder_v1_table(cfg.text.tie_word_embeddings)
