"""Unlimited-OCR checkpoint names -> ms_ocr names: the DeepEncoder-v1 table (ms_ocr/convert/table.py); the hub's
files and transformers' save_pretrained use the same names."""

from ms_ocr.convert.table import deepencoder_v1_table


def name_table(cfg):
    return deepencoder_v1_table(cfg.text.tie_word_embeddings)
