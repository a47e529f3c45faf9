"""Checkpoint names -> ms_ocr names for the PP-DocLayout models (transformers' current names, which ms_ocr's Cells
carry).

The hub files and transformers' save_pretrained use the original RT-DETR names; transformers renames them on load
(conversion_mapping.py, "rt_detr", which V2, V3 and V4 all use, V4 after its own reading-order renames): the same
renames here, applied in order to every key (`table`). Each model's convert.py lists its own renames and drops."""

from ms_ocr.convert.table import RenameTable

RT_DETR_RENAMES = [
    (r"out_proj", "o_proj"),
    (r"layers\.(\d+)\.fc1", r"layers.\1.mlp.fc1"),
    (r"layers\.(\d+)\.fc2", r"layers.\1.mlp.fc2"),
    (r"encoder\.encoder\.(\d+)\.layers", r"encoder.aifi.\1.layers"),
]

# Keys no version uses at inference.
DROPS = [
    r"\.num_batches_tracked$",
    r"^model\.denoising_class_embed\.",  # training-time denoising queries
]


def table(renames=(), drops=()):
    """The RenameTable of a model: its own renames before the RT-DETR ones, its drops beside the shared ones."""
    return RenameTable(list(renames) + RT_DETR_RENAMES, DROPS + list(drops), chain=True)
