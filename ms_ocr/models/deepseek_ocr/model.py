"""DeepSeek-OCR (v1) as one Cell: `vision` (hub `model.sam_model`, `model.vision_model`, `model.projector`,
`model.image_newline`, `model.view_seperator`), `model` (the MoE decoder) and `lm_head`."""

from mindspore import Tensor, nn, ops

from ms_ocr.models.base import VLMCell
from ms_ocr.models.deepseek_ocr.host import view_args
from ms_ocr.models.deepseek_ocr.vision import DeepEncoderV1
from ms_ocr.nn.deepencoder import DeepEncoderViews, moe_decoder, run_views


class _PostStep(nn.Cell):
    """CLIP + concat + projector for one view size, one graph."""

    def __init__(self, vision):
        super().__init__(auto_prefix=False)
        self.vision = vision

    def construct(self, sam_out, clip_pos_m):
        return self.vision.post(sam_out, clip_pos_m)


class DeepseekOCRModel(VLMCell, DeepEncoderViews):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.vision = DeepEncoderV1(cfg.sam, cfg.clip, cfg.text.hidden_size)
        self.model = moe_decoder(cfg.text)

    host_view_args = staticmethod(view_args)

    def encode_views(self, encoder, vision_inputs):
        """Per image: each view size (tiles as one batch, then the global view) through one compiled graph,
        then the rows in assembly order (item.head = the assembly index) from [tiles, global, newline, sep]."""
        out = []
        for item in vision_inputs:
            parts = [y.reshape(-1, y.shape[-1])
                     for y in run_views(encoder, self.vision, _PostStep, "deepseek_ocr_steps", item.embed)]
            dtype = parts[0].dtype
            parts.append(self.vision.extra_rows().astype(dtype))
            out.append(ops.gather(ops.concat(parts, 0), Tensor(item.head[0]), 0))
        return out[0] if len(out) == 1 else ops.concat(out, 0)
