"""PP-DocLayoutV3 (PaddlePaddle/PP-DocLayoutV3_safetensors): HGNetV2 + RT-DETR layout detector with a mask per block
and reading-order logits from its decoder (see ../README.md)."""

from ms_ocr.layout.pp_doclayout_v3.config import PPDocLayoutV3Config
from ms_ocr.layout.pp_doclayout_v3.convert import name_table
from ms_ocr.layout.pp_doclayout_v3.model import PPDocLayoutV3
from ms_ocr.layout.pp_doclayout_v3.postprocess import detections
from ms_ocr.layout.spec import LayoutSpec

SPEC = LayoutSpec("pp_doclayout_v3", "PP-DocLayoutV3", PPDocLayoutV3Config, PPDocLayoutV3, name_table,
                  ("logits", "pred_boxes", "order_logits", "out_masks"), "uint8", detections)

__all__ = ["SPEC", "PPDocLayoutV3", "PPDocLayoutV3Config", "name_table"]
