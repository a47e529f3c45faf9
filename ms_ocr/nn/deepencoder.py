"""Code DeepSeek-OCR v1 and v2 share on the device side: their model Cell's base (DeepEncoderModel), the DeepSeek MoE
decoder, the DeepEncoder view runner (SAM block by block, then the model's own post-SAM step, one view size per
compiled graph) and the MindIR export's view graphs."""

from mindspore import nn, ops

from ms_ocr.nn.decoder import CausalDecoder
from ms_ocr.nn.layers import Linear
from ms_ocr.nn.moe import MoE
from ms_ocr.nn.rope import MultiAxisRotary
from ms_ocr.nn.sam import SamLayerwise
from ms_ocr.nn.vlm import ViewsModel


class Projector(nn.Cell):
    """The linear projector from the vision width to the text width (hub `model.projector.layers`)."""

    def __init__(self, cin, cout):
        super().__init__()
        self.layers = Linear(cin, cout)


def moe_decoder(t):
    """The DeepSeek MoE decoder (MHA, dense first layers, routed + shared experts) shared by v1, v2 and
    Unlimited-OCR (whose config gives it a reference sliding window: t.sliding_window)."""
    def ffn(i):
        if t.mlp_layer_types[i] != "sparse":
            return None
        return MoE(t.hidden_size, t.moe_intermediate_size, t.n_routed_experts, t.num_experts_per_tok,
                   t.n_shared_experts, t.routed_scaling_factor, t.hidden_act)
    return CausalDecoder(t, MultiAxisRotary(t.head_dim, t.rope_theta), ffn=ffn, window=t.sliding_window)


# Tiles per vision call: on CPU each compiled graph keeps a static activation pool sized for its batch, so
# tiles go one at a time (a page's batch of tiles did not fit in memory beside the 3B model).
VISION_BATCH = 1


def run_views(encoder, vision, post, name, views):
    """Each view: SAM block by block (SamLayerwise), then `post(vision)` (a step Cell or a runner taking
    `call` first), VISION_BATCH images per call; returns one output per view (tiles concatenated in order).
    `encoder`: the runtime's VisionEncoder (its graph calls, host tensors and the step Cells it keeps)."""
    steps = encoder.cells(name, lambda: (SamLayerwise(vision.sam_model), post(vision)))  # built once per runtime
    call = encoder.call
    post_run = (lambda *args: call(steps[1], *args)) if isinstance(steps[1], nn.Cell) else \
        (lambda *args: steps[1](call, *args))
    outs = []
    for view in views:
        pixels, rest = view[0], [encoder.tensor(a) for a in view[1:]]
        parts = []
        for start in range(0, pixels.shape[0], VISION_BATCH):
            sam_out = steps[0](call, encoder.tensor(pixels[start:start + VISION_BATCH]), *rest[:5])
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


class DeepEncoderModel(ViewsModel):
    """A DeepEncoder VLM (DeepSeek-OCR v1, v2): its `vision` Cell, the DeepSeek MoE decoder, and encode_views: per
    image, each view size (tiles as one batch, then the global view) through SAM block by block and the model's
    `post_step` (one compiled graph per size, kept under `steps_name`), then `assemble(item, views)` -> [M, H]. A
    model sets host_view_args (its host.view_args: one view size's graph inputs from the host), post_step, steps_name
    and assemble; the MindIR export takes its view and assembly graphs."""

    host_view_args = post_step = steps_name = None

    def __init__(self, cfg, vision):
        super().__init__(cfg)
        self.vision = vision
        self.model = moe_decoder(cfg.text)
        self.attention_window = cfg.text.sliding_window

    def encode_views(self, encoder, vision_inputs):
        out = [self.assemble(item, run_views(encoder, self.vision, self.post_step, self.steps_name, item.embed))
               for item in vision_inputs]
        return out[0] if len(out) == 1 else ops.concat(out, 0)

    def view_args(self, pixels):
        return self.host_view_args(self.cfg, pixels)

    def view_step(self):
        return ViewStep(self.vision)

    def assemble_step(self):
        return AssembleStep(self.vision)
