"""DeepSeek-OCR (v1) as one Cell: `vision` (hub `model.sam_model`, `model.vision_model`, `model.projector`,
`model.image_newline`, `model.view_seperator`), `model` (the MoE decoder) and `lm_head`."""

from mindspore import Tensor, nn, ops

from ms_ocr.nn.deepencoder import DeepEncoderModel
from ms_ocr.models.deepseek_ocr.host import view_args
from ms_ocr.models.deepseek_ocr.vision import DeepEncoderV1


class _PostStep(nn.Cell):
    """CLIP + concat + projector for one view size, one graph."""

    def __init__(self, vision):
        super().__init__(auto_prefix=False)
        self.vision = vision

    def construct(self, sam_out, clip_pos_m):
        return self.vision.post(sam_out, clip_pos_m)


class DeepseekOCRModel(DeepEncoderModel):
    host_view_args = staticmethod(view_args)
    post_step, steps_name = _PostStep, "deepseek_ocr_steps"

    def __init__(self, cfg):
        super().__init__(cfg, DeepEncoderV1(cfg.sam, cfg.clip, cfg.text.hidden_size))

    def assemble(self, item, views):
        """The rows in assembly order (item.head = the assembly index) from [tiles, global, newline, sep]."""
        parts = [y.reshape(-1, y.shape[-1]) for y in views]
        parts.append(self.vision.extra_rows().astype(parts[0].dtype))
        return ops.gather(ops.concat(parts, 0), Tensor(item.head[0]), 0)
