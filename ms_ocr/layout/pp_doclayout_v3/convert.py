"""PP-DocLayoutV3 checkpoint names -> ms_ocr names: the shared RT-DETR renames (layout/convert.py). With tied heads
(tie_word_embeddings, the default) the reference's decoder class and box heads are the encoder's, so a file that
carries them under the decoder's names has them dropped, as loading into the reference replaces them by the tie."""

from ms_ocr.layout.convert import table

TIED = [r"^model\.decoder\.class_embed\.", r"^model\.decoder\.bbox_embed\."]


def name_table(cfg):
    return table(drops=TIED if cfg.tie_word_embeddings else ())
