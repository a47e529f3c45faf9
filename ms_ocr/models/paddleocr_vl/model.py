"""PaddleOCR-VL 0.9B as one Cell with the hub's parameter names (visual.*, mlp_AR.*, model.*, lm_head)."""

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

    def encode_images(self, patches, interp_idx, interp_w, pos_hw, segment_ids, merge_idx):
        """Packed patches of one or more images -> merged image tokens [M, text_hidden]."""
        feats = self.visual(patches, interp_idx, interp_w, pos_hw, segment_ids)
        return self.mlp_AR(feats, merge_idx)

    def embed(self, input_ids):
        return self.model.embed_tokens(input_ids)

    def text(self, x, pos, cache_pos):
        return self.model(x, pos, cache_pos)

    def logits(self, h):
        weight = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        return self.head_matmul(h, weight)

    def allocate_cache(self, batch, slots, dtype):
        self.model.allocate_cache(batch, slots, dtype)
