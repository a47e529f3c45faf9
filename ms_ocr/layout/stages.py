"""A PP-DocLayout model run as a few graphs instead of one: the front (backbone, hybrid encoder, query selection),
one decoder layer with its weights as inputs (layout/decoder.py DecoderStep: compiled once, run for every layer), and
the back (the version's heads). Each compiled graph keeps its activations for the process's life (MindSpore's CPU
backend: a pool per graph), so the decoder's layers share one pool, and the compile is the front's, one layer's and
the heads' instead of six unrolled layers' (measured in ms_ocr/layout/README.md, "Speed")."""

from mindspore import nn

from ms_ocr.compiler import CompileTimer
from ms_ocr.layout.decoder import DecoderStep

GROUPS = ("layout_front", "layout_decoder", "layout_back")  # the compile-time records (CompileTimer.seconds)


class _Front(nn.Cell):
    """The front for one input size: its host tables (position embeddings, anchors) held as the graph's constants."""

    def __init__(self, net, pos, anchor_logits, valid):
        super().__init__(auto_prefix=False)  # never renames the model's parameters
        self.net = net
        self.pos, self.anchor_logits, self.valid = pos, anchor_logits, valid

    def construct(self, pixel_values):
        return self.net.model.front(pixel_values, self.pos, self.anchor_logits, self.valid)


class _Back(nn.Cell):
    def __init__(self, net):
        super().__init__(auto_prefix=False)
        self.net = net

    def construct(self, x, ref):
        return self.net.back(x, ref)


class _BackWith(_Back):
    def construct(self, x, ref, extra):
        return self.net.back(x, ref, extra)


class _BackWithCoords(_Back):
    def construct(self, x, ref, extra, coords):
        return self.net.back(x, ref, extra, coords)


class StagedModel:
    """net(pixel_values, *host) computed stage by stage, the same outputs as the whole graph. Each graph is compiled
    once (CompileTimer: a layer's weights are new inputs of the same graph, not a new graph); `release()` frees them
    and their activation memory (they compile again on the next call)."""

    def __init__(self, net, host):
        model = net.model
        pos, anchors, valid, shapes = host[:4]
        coords = host[4] if len(host) > 4 else None
        self.back_inputs = () if coords is None else (coords,)
        self.front = _Front(net, pos, anchors, valid)
        self.back = (_Back if model.front_extras == 0 else _BackWith if coords is None else _BackWithCoords)(net)
        self.step = DecoderStep(net.kernels, model.cfg, shapes, model.quads)
        pos_head = model.decoder.query_pos_head.weights()
        self.layer_weights = [pos_head + layer.weights() + model.box_head(i).weights()
                              for i, layer in enumerate(model.decoder.layers)]
        self.compiler = CompileTimer(evictable=GROUPS)

    def __call__(self, pixel_values):
        call = self.compiler.call
        front, decoder, back = GROUPS
        x, ref, memory, extras = call(front, self.front, pixel_values)
        for weights in self.layer_weights:
            x, ref = call(decoder, self.step, x, ref, memory, *weights)
        return call(back, self.back, x, ref, *extras, *self.back_inputs)

    def release(self):
        """Free the compiled graphs and their activation pools now."""
        return sum(self.compiler.free_group(group) for group in GROUPS)
