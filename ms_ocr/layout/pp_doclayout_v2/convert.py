"""PP-DocLayoutV2 checkpoint names -> ms_ocr names: the shared RT-DETR renames (layout/convert.py) and the keys the
reference builds but never uses."""

from ms_ocr.layout.convert import table

DROPS = [r"^reading_order\.encoder\.rel_pos_[xy]_bias\."]  # the reading order's unused spatial bias path


def name_table(cfg=None):
    return table(drops=DROPS)
