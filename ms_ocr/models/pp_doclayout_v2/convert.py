"""PP-DocLayoutV2 checkpoint names -> ms_ocr names (transformers' current names, which ms_ocr's Cells carry).

The hub file and transformers' save_pretrained use the original RT-DETR names; transformers renames them on load
(conversion_mapping.py, "rt_detr"): the same renames here, applied in order to every key."""

from ms_ocr.convert.table import RenameTable

RENAMES = [
    (r"out_proj", "o_proj"),
    (r"layers\.(\d+)\.fc1", r"layers.\1.mlp.fc1"),
    (r"layers\.(\d+)\.fc2", r"layers.\1.mlp.fc2"),
    (r"encoder\.encoder\.(\d+)\.layers", r"encoder.aifi.\1.layers"),
]

# Keys the reference does not use at inference.
DROPS = [
    r"\.num_batches_tracked$",
    r"^reading_order\.encoder\.rel_pos_[xy]_bias\.",   # built but never used (spatial bias path)
    r"^model\.denoising_class_embed\.",                 # training-time denoising queries
]


def name_table(cfg=None):
    return RenameTable(RENAMES, DROPS, chain=True)
