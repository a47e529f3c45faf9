"""PaddleOCR-VL 0.9B as one Cell with the hub's parameter names (visual.*, mlp_AR.*, model.*, lm_head).

The methods are the interface ms_ocr/interfaces.py states (VLMModel, ViTStackTower).
"""

from ms_ocr.nn.vlm import ViTStackModel
from ms_ocr.models.paddleocr_vl.language import TextModel
from ms_ocr.models.paddleocr_vl.vision import Projector, VisionModel


class PaddleOCRVLModel(ViTStackModel):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.visual = VisionModel(cfg.vision)
        self.mlp_AR = Projector(cfg.vision.hidden_size, cfg.text.hidden_size, cfg.vision.spatial_merge_size)
        self.model = TextModel(cfg.text)

    def vision_layers(self):
        return list(self.visual.vision_model.encoder.layers)

    # one image per call (no padding, no mask)
    def vision_embed(self, patches, interp_idx, interp_w, pos_hw):
        vm = self.visual.vision_model
        cos, sin = vm.encoder.rotary(pos_hw)
        return vm.embeddings(patches, interp_idx, interp_w), cos, sin

    def vision_head(self, x, merge_idx):
        return self.mlp_AR(self.visual.vision_model.post_layernorm(x), merge_idx)
