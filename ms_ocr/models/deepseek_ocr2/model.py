"""DeepSeek-OCR-2 as one Cell: `vision` (hub `model.sam_model`, `model.qwen2_model`, `model.projector`,
`model.view_seperator`), `model` (the MoE decoder, hub `model.embed_tokens/layers/norm`) and `lm_head`."""

import numpy as np
from mindspore import Tensor, nn, ops

from ms_ocr.nn.deepencoder import DeepEncoderModel
from ms_ocr.models.deepseek_ocr2.host import view_args
from ms_ocr.models.deepseek_ocr2.vision import ENCODER_LAYER_WEIGHTS, DeepseekOCR2Vision, EncoderLayerStep
from ms_ocr.ops import get_activation


class _EncoderPrepStep(nn.Cell):
    def __init__(self, vision):
        super().__init__(auto_prefix=False)
        self.vision = vision

    def construct(self, sam_out, pos, visible):
        n, g, _, c = sam_out.shape
        return self.vision.qwen2_model.prepare(sam_out.reshape(n, g * g, c), pos, visible)


class _EncoderHeadStep(_EncoderPrepStep):
    def construct(self, x, query_rows):
        q = ops.gather(self.vision.qwen2_model.model.model.norm(x), query_rows, 1)
        y = self.vision.projector.layers(q)
        return y.reshape(-1, y.shape[-1])


class QueryEncoderLayerwise:
    """The query encoder through one shared layer graph (weights as inputs), then norm + projector."""

    def __init__(self, vision):
        enc = vision.qwen2_model.model.model
        cfg = vision.encoder_cfg
        self.vision, self.layers = vision, list(enc.layers)
        self.prep, self.head = _EncoderPrepStep(vision), _EncoderHeadStep(vision)
        self.layer_step = EncoderLayerStep(vision.kernels, cfg.num_attention_heads, cfg.num_key_value_heads,
                                           cfg.rms_norm_eps, get_activation(cfg.hidden_act))

    def __call__(self, call, sam_out, pos, visible):
        x, cos, sin, mask = call(self.prep, sam_out, pos, visible)
        for layer in self.layers:
            x = call(self.layer_step, x, cos, sin, mask, *layer.weights(ENCODER_LAYER_WEIGHTS))
        patches = sam_out.shape[1] * sam_out.shape[2]
        rows = Tensor(np.arange(patches, x.shape[1], dtype=np.int32))
        return call(self.head, x, rows)


class DeepseekOCR2Model(DeepEncoderModel):
    host_view_args = staticmethod(view_args)
    post_step, steps_name = QueryEncoderLayerwise, "deepseek_ocr2_steps"

    def __init__(self, cfg):
        super().__init__(cfg, DeepseekOCR2Vision(cfg.sam, cfg.encoder, cfg.text.hidden_size))

    def assemble(self, item, views):
        """Its views (local tiles, then the global view) and view_seperator -> [M, H]."""
        sep = self.vision.view_seperator.value()[None].astype(views[-1].dtype)
        return ops.concat(list(views) + [sep], 0)
