"""PP-DocLayoutV2 (PaddlePaddle/PP-DocLayoutV2_safetensors): HGNetV2 + RT-DETR layout detector with a reading-order
network over the kept boxes (see ../README.md)."""

from ms_ocr.layout.postprocess import postprocess
from ms_ocr.layout.pp_doclayout_v2.config import PPDocLayoutV2Config
from ms_ocr.layout.pp_doclayout_v2.convert import name_table
from ms_ocr.layout.pp_doclayout_v2.model import PPDocLayoutV2
from ms_ocr.layout.spec import LayoutSpec


def detections(outputs, target_sizes, threshold, pcfg):
    logits, boxes, order_logits, _ = outputs
    return postprocess(logits, boxes, order_logits, target_sizes, threshold)


SPEC = LayoutSpec("pp_doclayout_v2", "PP-DocLayoutV2", PPDocLayoutV2Config, PPDocLayoutV2, name_table,
                  ("logits", "pred_boxes", "order_logits", "kept"), "uint8", detections)

__all__ = ["SPEC", "PPDocLayoutV2", "PPDocLayoutV2Config", "name_table"]
