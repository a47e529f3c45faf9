"""HunYuan 0.5B dense decoder `model.*`: GQA with q/k RMSNorm after the rope, XD-RoPE over 4 position axes
with the fixed NTK-alpha base (reference: transformers HunYuanVLTextModel)."""

from ms_ocr.nn import CausalDecoder, MultiAxisRotary


def TextModel(cfg):
    sections = cfg.xdrope_section
    rotary = MultiAxisRotary(cfg.head_dim, cfg.rope_base, sections, num_axes=len(sections), layout="chunks")
    return CausalDecoder(cfg, rotary, qk_norm=True)
