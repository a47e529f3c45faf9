"""PP-DocLayoutV4 (PaddlePaddle/PP-DocLayoutV4_safetensors): HGNetV2 + RT-DETR layout detector over quadrilaterals,
with relative and successor reading-order heads and optional page geometry (see ../README.md)."""

from ms_ocr.layout.pp_doclayout_v4.config import PPDocLayoutV4Config
from ms_ocr.layout.pp_doclayout_v4.convert import name_table
from ms_ocr.layout.pp_doclayout_v4.model import PPDocLayoutV4
from ms_ocr.layout.pp_doclayout_v4.postprocess import detections
from ms_ocr.layout.spec import LayoutSpec

SPEC = LayoutSpec("pp_doclayout_v4", "PP-DocLayoutV4", PPDocLayoutV4Config, PPDocLayoutV4, name_table,
                  ("logits", "pred_boxes", "relative_order_logits", "successor_order_logits", "warp_params"), "float",
                  detections)

__all__ = ["SPEC", "PPDocLayoutV4", "PPDocLayoutV4Config", "name_table"]
