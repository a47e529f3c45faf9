"""PP-DocLayoutV2 (PaddlePaddle/PP-DocLayoutV2_safetensors): HGNetV2 + RT-DETR layout detector with a reading-order
network; `LayoutDetector` runs it on a page (see README.md)."""

from ms_ocr.config_utils import load_config_json, require_model_type
from ms_ocr.convert.loader import load_weights
from ms_ocr.convert.safetensors_io import iter_checkpoint
from ms_ocr.models.pp_doclayout_v2.config import PPDocLayoutV2Config
from ms_ocr.models.pp_doclayout_v2.convert import name_table
from ms_ocr.models.pp_doclayout_v2.model import PPDocLayoutV2
from ms_ocr.models.pp_doclayout_v2.runner import LayoutBlock, LayoutDetector


def config_from_dir(model_dir):
    raw = load_config_json(model_dir)
    require_model_type(raw, ("pp_doclayout_v2",), "PP-DocLayoutV2")
    return PPDocLayoutV2Config.from_dict(raw)


def load_model(model_dir):
    """The layout model with the folder's weights (strict: missing or unexpected keys are an error), fp32."""
    import mindspore as ms
    cfg = config_from_dir(model_dir)
    net = PPDocLayoutV2(cfg)
    load_weights(net, iter_checkpoint(model_dir), name_table(cfg), ms.float32, None, source=model_dir)
    return cfg, net


__all__ = ["config_from_dir", "load_model", "name_table", "LayoutBlock", "LayoutDetector", "PPDocLayoutV2"]
