"""Test-only builders (tiny checkpoints, tokenizers); they import torch/transformers, ms_ocr never does."""
