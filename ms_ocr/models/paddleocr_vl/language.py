"""ERNIE-4.5-0.3B decoder with 3D MRoPE (reference: transformers PaddleOCRTextModel)."""

from ms_ocr.nn import CausalDecoder, MultiAxisRotary


def TextModel(cfg):
    return CausalDecoder(cfg, MultiAxisRotary(cfg.head_dim, cfg.rope_theta, cfg.mrope_section, num_axes=3))
