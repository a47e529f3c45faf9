"""PP-DocLayoutV4 checkpoint names -> ms_ocr names: its reading-order heads' original names (model-level
`decoder_order_head`, `decoder_global_pointer`, their `roor` successor twins and `s2r_fusion.a`) moved under the
decoder as transformers renames them (conversion_mapping.py, "pp_doclayout_v4"), then the shared RT-DETR renames."""

from ms_ocr.layout.convert import table

RENAMES = [
    (r"decoder_roor_order_head\.", "decoder.successor_order_head.proj."),
    (r"decoder_roor_global_pointer\.", "decoder.successor_order_head.global_pointer."),
    (r"decoder_order_head\.", "decoder.relative_order_head.proj."),
    (r"decoder_global_pointer\.", "decoder.relative_order_head.global_pointer."),
    (r"s2r_fusion\.a$", "decoder.relative_order_head.s2r_fusion.closure_weight"),
]


def name_table(cfg=None):
    return table(renames=RENAMES)
