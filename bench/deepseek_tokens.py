"""The tiny DeepSeek-OCR tokenizer's special tokens and ids (a byte-level BPE of BPE_VOCAB entries, bench/tiny_bpe.py,
then SPECIALS): the tiny and real-size DeepSeek-OCR / DeepSeek-OCR-2 test checkpoints write it and name its ids in
their configs."""

BPE_VOCAB = 360
SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<image>", "<|grounding|>", "<|ref|>", "<|/ref|>",
            "<|det|>", "<|/det|>", "<｜▁pad▁｜>"]
IDS = {tok: BPE_VOCAB + i for i, tok in enumerate(SPECIALS)}
BOS, EOS = IDS["<｜begin▁of▁sentence｜>"], IDS["<｜end▁of▁sentence｜>"]
IMAGE_TOKEN_ID = IDS["<image>"]
