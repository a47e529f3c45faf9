"""HunyuanOCR 1B as one Cell with the hub's parameter names (vit.*, vit.perceive.*, model.*, lm_head).

The methods are the interface ms_ocr/interfaces.py states (VLMModel, ViTStackTower).
"""

from ms_ocr.nn.vlm import ViTStackModel
from ms_ocr.models.hunyuan_vl.language import TextModel
from ms_ocr.models.hunyuan_vl.vision import VisionTransformer


class HunyuanOCRModel(ViTStackModel):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.vit = VisionTransformer(cfg.vision, cfg.text.hidden_size)
        self.model = TextModel(cfg.text)

    def vision_layers(self):
        return list(self.vit.layers)

    # one image per call: bidirectional attention over its patches, no rope
    def vision_embed(self, patches, interp_idx, interp_w):
        return self.vit.embeddings(patches, interp_idx, interp_w)

    def vision_head(self, x, merge_idx, row_idx):
        return self.vit.perceive(x, merge_idx, row_idx)
