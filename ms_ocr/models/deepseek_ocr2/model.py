"""DeepSeek-OCR-2 as one Cell: `vision` (hub `model.sam_model`, `model.qwen2_model`, `model.projector`,
`model.view_seperator`), `model` (the MoE decoder, hub `model.embed_tokens/layers/norm`) and `lm_head`."""

from mindspore import nn, ops

from ms_ocr.models.base import VLMCell
from ms_ocr.models.deepseek_ocr2.vision import DeepseekOCR2Vision
from ms_ocr.nn import CausalDecoder, MultiAxisRotary
from ms_ocr.nn.moe import MoE
from ms_ocr.nn.sam import SamLayerwise


def moe_decoder(t):
    """The DeepSeek MoE decoder (MHA, dense first layers, routed + shared experts) shared by v1 and v2."""
    def ffn(i):
        if t.mlp_layer_types[i] != "sparse":
            return None
        return MoE(t.hidden_size, t.moe_intermediate_size, t.n_routed_experts, t.num_experts_per_tok,
                   t.n_shared_experts, t.routed_scaling_factor, t.hidden_act)
    return CausalDecoder(t, MultiAxisRotary(t.head_dim, t.rope_theta), ffn=ffn)


class _PostStep(nn.Cell):
    """Everything after SAM for one view size (query encoder + projector), one graph."""

    def __init__(self, vision):
        super().__init__(auto_prefix=False)
        self.vision = vision

    def construct(self, sam_out, pos, visible):
        return self.vision.post(sam_out, pos, visible)


def run_views(runtime, vision, post_step_cls, name, views):
    """Each view: SAM block by block (SamLayerwise), then the model's post-SAM graph; returns their outputs."""
    steps = runtime.__dict__.setdefault(name, (SamLayerwise(vision.sam_model), post_step_cls(vision)))
    call = lambda step, *args: runtime.compiler.call("vision", step, *args)  # noqa: E731
    outs = []
    for view in views:
        args = [runtime.tensor(a) for a in view]
        sam_out = steps[0](call, *args[:6])
        outs.append(call(steps[1], sam_out, *args[6:]))
    return outs


class DeepseekOCR2Model(VLMCell):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.vision = DeepseekOCR2Vision(cfg.sam, cfg.encoder, cfg.text.hidden_size)
        self.model = moe_decoder(cfg.text)

    def vision_layers(self):
        return []

    def encode_views(self, runtime, vision_inputs):
        """Per image: its views (local tiles, then the global view), each size through one compiled graph,
        concatenated with view_seperator -> [M, H]."""
        feats = []
        for item in vision_inputs:
            feats += run_views(runtime, self.vision, _PostStep, "deepseek_ocr2_steps", item.embed)
            feats.append(self.vision.view_seperator.value()[None].astype(feats[-1].dtype))
        return ops.concat(feats, 0)
