"""DeepSeek-OCR-2 as one Cell: `vision` (hub `model.sam_model`, `model.qwen2_model`, `model.projector`,
`model.view_seperator`), `model` (the MoE decoder, hub `model.embed_tokens/layers/norm`) and `lm_head`."""

import numpy as np
from mindspore import Tensor, nn, ops

from ms_ocr.models.base import VLMCell
from ms_ocr.models.deepseek_ocr2.vision import ENCODER_LAYER_WEIGHTS, DeepseekOCR2Vision, EncoderLayerStep
from ms_ocr.nn import CausalDecoder, MultiAxisRotary
from ms_ocr.nn.moe import MoE
from ms_ocr.nn.sam import SamLayerwise
from ms_ocr.ops import get_activation


def moe_decoder(t):
    """The DeepSeek MoE decoder (MHA, dense first layers, routed + shared experts) shared by v1 and v2."""
    def ffn(i):
        if t.mlp_layer_types[i] != "sparse":
            return None
        return MoE(t.hidden_size, t.moe_intermediate_size, t.n_routed_experts, t.num_experts_per_tok,
                   t.n_shared_experts, t.routed_scaling_factor, t.hidden_act)
    return CausalDecoder(t, MultiAxisRotary(t.head_dim, t.rope_theta), ffn=ffn)


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
        self.layer_step = EncoderLayerStep(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.rms_norm_eps,
                                           get_activation(cfg.hidden_act))

    def __call__(self, call, sam_out, pos, visible):
        x, cos, sin, mask = call(self.prep, sam_out, pos, visible)
        for layer in self.layers:
            x = call(self.layer_step, x, cos, sin, mask, *layer.weights(ENCODER_LAYER_WEIGHTS))
        patches = sam_out.shape[1] * sam_out.shape[2]
        rows = Tensor(np.arange(patches, x.shape[1], dtype=np.int32))
        return call(self.head, x, rows)


# Tiles per vision call: on CPU each compiled graph keeps a static activation pool sized for its batch, so
# tiles go one at a time (the 6-tile batch of a 768x1024 page did not fit in 24 GB beside the 3B model).
VISION_BATCH = 1


def run_views(runtime, vision, post, name, views):
    """Each view: SAM block by block (SamLayerwise), then `post(vision)` (a step Cell or a runner taking
    `call` first), VISION_BATCH images per call; returns one output per view (tiles concatenated in order)."""
    if name not in runtime.__dict__:  # built once per runtime (setdefault would rebuild the Cells every call)
        runtime.__dict__[name] = (SamLayerwise(vision.sam_model), post(vision))
    steps = runtime.__dict__[name]
    call = lambda step, *args: runtime.compiler.call("vision", step, *args)  # noqa: E731
    post_run = (lambda *args: call(steps[1], *args)) if isinstance(steps[1], nn.Cell) else \
        (lambda *args: steps[1](call, *args))
    outs = []
    for view in views:
        pixels, rest = view[0], [runtime.tensor(a) for a in view[1:]]
        parts = []
        for start in range(0, pixels.shape[0], VISION_BATCH):
            sam_out = steps[0](call, runtime.tensor(pixels[start:start + VISION_BATCH]), *rest[:5])
            parts.append(post_run(sam_out, *rest[5:]))
        outs.append(parts[0] if len(parts) == 1 else ops.concat(parts, 0))
    return outs


class ViewStep(nn.Cell):
    """One view size of a DeepEncoder in one graph (MindIR export): pixels [n, 3, S, S] and that size's tables
    -> its image tokens [rows, text_hidden] (before assembly)."""

    def __init__(self, vision):
        super().__init__(auto_prefix=False)
        self.vision = vision

    def construct(self, *args):
        y = self.vision(*args)
        return y.reshape(-1, y.shape[-1])


class AssembleStep(ViewStep):
    """An image's view tokens [N, H] and the vision's extra rows (newline / separator vectors) in the host's
    order: feats [N, H], index [M] into concat(feats, extra rows) -> [M, H]."""

    def construct(self, feats, index):
        return ops.gather(ops.concat((feats, self.vision.extra_rows().astype(feats.dtype)), 0), index, 0)


class ViewExport:
    """The MindIR export's vision graphs of a DeepEncoder model (ms_ocr/export/mindir.py)."""

    def view_step(self):
        return ViewStep(self.vision)

    def assemble_step(self):
        return AssembleStep(self.vision)


class DeepseekOCR2Model(VLMCell, ViewExport):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.vision = DeepseekOCR2Vision(cfg.sam, cfg.encoder, cfg.text.hidden_size)
        self.model = moe_decoder(cfg.text)

    def vision_layers(self):
        return []

    def view_args(self, pixels):
        from ms_ocr.models.deepseek_ocr2 import view_args
        return view_args(self.cfg, pixels)

    def encode_views(self, runtime, vision_inputs):
        """Per image: its views (local tiles, then the global view), each size through one compiled graph,
        concatenated with view_seperator -> [M, H]."""
        feats = []
        for item in vision_inputs:
            feats += run_views(runtime, self.vision, QueryEncoderLayerwise, "deepseek_ocr2_steps", item.embed)
            feats.append(self.vision.view_seperator.value()[None].astype(feats[-1].dtype))
        return ops.concat(feats, 0)
