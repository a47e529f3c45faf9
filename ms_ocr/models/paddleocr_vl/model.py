"""PaddleOCR-VL 0.9B as one Cell with the hub's parameter names (visual.*, mlp_AR.*, model.*, lm_head).

The methods are the interface ms_ocr/steps.py and ms_ocr/runtime.py drive.
"""

from mindspore import nn, ops

from ms_ocr.models.paddleocr_vl.language import TextModel
from ms_ocr.models.paddleocr_vl.vision import Projector, VisionModel
from ms_ocr.nn import Linear


class PaddleOCRVLModel(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.visual = VisionModel(cfg.vision)
        self.mlp_AR = Projector(cfg.vision.hidden_size, cfg.text.hidden_size, cfg.vision.spatial_merge_size)
        self.model = TextModel(cfg.text)
        self.tied = cfg.text.tie_word_embeddings
        if not self.tied:
            self.lm_head = Linear(cfg.text.hidden_size, cfg.text.vocab_size, bias=False)
        self.head_matmul = ops.MatMul(transpose_b=True)
        self.num_kv_heads = cfg.text.num_key_value_heads

    def vision_layers(self):
        return list(self.visual.vision_model.encoder.layers)

    def text_layers(self):
        return list(self.model.layers)

    # ---- vision: one image per call (no padding, no mask) --------------------------------------
    def vision_embed(self, patches, interp_idx, interp_w, pos_hw):
        vm = self.visual.vision_model
        cos, sin = vm.encoder.rotary(pos_hw)
        return vm.embeddings(patches, interp_idx, interp_w), cos, sin

    def vision_head(self, x, merge_idx):
        return self.mlp_AR(self.visual.vision_model.post_layernorm(x), merge_idx)

    # ---- text ---------------------------------------------------------------------------------
    def embed(self, input_ids):
        return self.model.embed_tokens(input_ids)

    def text_rotary(self, pos):
        return self.model.rotary(pos)

    def text(self, x, pos, cache_pos):
        return self.model(x, pos, cache_pos)

    def final_norm(self, h):
        return self.model.norm(h)

    def logits(self, h):
        weight = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        return self.head_matmul(h, weight)

    def allocate_cache(self, batch, slots, dtype):
        for layer in self.text_layers():
            layer.self_attn.allocate_cache(batch, slots, dtype)
