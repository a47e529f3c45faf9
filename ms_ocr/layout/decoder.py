"""The RT-DETR decoder the PP-DocLayout models share (transformers' PPDocLayoutV2Decoder / V3 / V4 layers): self-
attention with the query position head, multi-scale deformable attention, a ReLU MLP, post-norm; each layer's box
head refines the references in logit space. Written once as functions of explicit weights: the layer Cells call them
with their Parameters (one graph for the whole model), and DecoderStep with a layer's weights as graph inputs, so one
compiled graph serves every layer (the staged runner, layout/stages.py)."""

from mindspore import nn, ops

from ms_ocr.layout.deformable import MultiscaleDeformableAttention, deformable_attention
from ms_ocr.layout.encoder import SelfAttention, _MLP, self_attention
from ms_ocr.nn import functional as F
from ms_ocr.nn.layers import LayerNorm, Linear
from ms_ocr.ops import get_activation

LAYER_WEIGHTS = 26  # a decoder layer's weights (DecoderLayer.weights)
HEAD_WEIGHTS = 6  # a 3-layer box head's (mlp_weights)


def inverse_sigmoid(x, eps=1e-5):
    x = ops.clip(x, 0.0, 1.0)
    return ops.log(ops.clip(x, eps, None) / ops.clip(1 - x, eps, None))


def quad_to_rect(quad):
    """[..., 10] quads (cx, cy, corner offsets + 0.5) -> [..., 4] (cx, cy, w, h): the predicted centre and the
    extent of the offsets, where PP-DocLayoutV4's deformable attention samples."""
    ox, oy = quad[..., 2::2] - 0.5, quad[..., 3::2] - 0.5
    w = ops.amax(ox, -1, keepdims=True) - ops.amin(ox, -1, keepdims=True)
    h = ops.amax(oy, -1, keepdims=True) - ops.amin(oy, -1, keepdims=True)
    return ops.concat((quad[..., :2], w, h), -1)


def mlp(kn, x, weights):
    """Linear layers with ReLU between; weights (weight, bias) per layer."""
    n = len(weights) // 2
    for i in range(n):
        x = F.linear(kn, x, weights[2 * i], weights[2 * i + 1])
        if i < n - 1:
            x = ops.relu(x)
    return x


class MLPHead(nn.Cell):
    """The reference's MLPPredictionHead."""

    def __init__(self, cin, hidden, cout, layers):
        super().__init__()
        dims = [cin] + [hidden] * (layers - 1) + [cout]
        self.layers = nn.CellList([Linear(a, b) for a, b in zip(dims[:-1], dims[1:])])

    def weights(self):
        out = ()
        for layer in self.layers:
            out = out + (layer.weight, layer.bias)
        return out

    def construct(self, x):
        return mlp(self.kernels, x, self.weights())


def decoder_layer(kn, x, pos, memory, reference, shapes, weights, heads, points, act, eps):
    """One post-norm decoder layer; weights: DecoderLayer.weights()'s 26 tensors, in that order."""
    attn, (ln1w, ln1b), msda = weights[:8], weights[8:10], weights[10:18]
    (ln2w, ln2b), (f1w, f1b, f2w, f2b), (ln3w, ln3b) = weights[18:20], weights[20:24], weights[24:26]
    x = F.layer_norm(kn, x + self_attention(kn, x, pos, attn, heads), ln1w, ln1b, eps)
    levels = len(shapes)
    x = F.layer_norm(kn, x + deformable_attention(kn, x, pos, memory, reference, shapes, msda, heads, levels, points),
                     ln2w, ln2b, eps)
    h = F.linear(kn, get_activation(act)(kn, F.linear(kn, x, f1w, f1b)), f2w, f2b)
    return F.layer_norm(kn, x + h, ln3w, ln3b, eps)


class DecoderLayer(nn.Cell):
    def __init__(self, cfg, levels):
        super().__init__()
        d, eps = cfg.d_model, cfg.layer_norm_eps
        self.heads, self.points, self.eps, self.act = cfg.decoder_attention_heads, cfg.decoder_n_points, eps, \
            cfg.decoder_activation_function
        self.self_attn = SelfAttention(d, cfg.decoder_attention_heads)
        self.self_attn_layer_norm = LayerNorm(d, eps)
        self.encoder_attn = MultiscaleDeformableAttention(d, cfg.decoder_attention_heads, levels, cfg.decoder_n_points)
        self.encoder_attn_layer_norm = LayerNorm(d, eps)
        self.mlp = _MLP(d, cfg.decoder_ffn_dim, cfg.decoder_activation_function)
        self.final_layer_norm = LayerNorm(d, eps)

    def weights(self):
        """The layer's LAYER_WEIGHTS tensors, in decoder_layer's order."""
        return (self.self_attn.weights() + (self.self_attn_layer_norm.weight, self.self_attn_layer_norm.bias)
                + self.encoder_attn.weights()
                + (self.encoder_attn_layer_norm.weight, self.encoder_attn_layer_norm.bias, self.mlp.fc1.weight,
                   self.mlp.fc1.bias, self.mlp.fc2.weight, self.mlp.fc2.bias, self.final_layer_norm.weight,
                   self.final_layer_norm.bias))

    def construct(self, x, pos, memory, reference, shapes):
        return decoder_layer(self.kernels, x, pos, memory, reference, shapes, self.weights(), self.heads, self.points,
                             self.act, self.eps)


class Decoder(nn.Cell):
    """The decoder layers and the query position head (its input: the `coords` of a reference box); the class and
    box heads are each model's (per layer, shared with the encoder's, or quads)."""

    def __init__(self, cfg, coords=4):
        super().__init__()
        self.layers = nn.CellList([DecoderLayer(cfg, cfg.num_feature_levels) for _ in range(cfg.decoder_layers)])
        self.query_pos_head = MLPHead(coords, 2 * cfg.d_model, cfg.d_model, 2)


def refine(decoder, box_heads, per_layer, target, memory, ref, shapes, quads=False):
    """The decoder loop in one graph: each layer, then its box head's update of the reference `ref` ([0, 1]; the
    update in logit space). `box_heads`: one head per layer (`per_layer`) or one for all. Returns the last hidden
    states and references."""
    x = target
    for i, layer in enumerate(decoder.layers):
        x = layer(x, decoder.query_pos_head(ref), memory, quad_to_rect(ref) if quads else ref, shapes)
        ref = ops.sigmoid((box_heads[i] if per_layer else box_heads)(x) + inverse_sigmoid(ref))
    return x, ref


class DecoderStep(nn.Cell):
    """One decoder layer and its box update, every weight a graph input (the query position head's 4, the layer's
    LAYER_WEIGHTS, its box head's HEAD_WEIGHTS): compiled once, run for each layer. MindSpore takes a graph's
    inputs one by one (a tuple argument would be folded into the graph as a constant)."""

    def __init__(self, kernels, cfg, shapes, quads):
        super().__init__()
        self.kernels, self.shapes, self.quads = kernels, shapes, quads
        self.heads, self.points, self.eps, self.act = cfg.decoder_attention_heads, cfg.decoder_n_points, \
            cfg.layer_norm_eps, cfg.decoder_activation_function

    def construct(self, x, ref, memory, p0w, p0b, p1w, p1b, qw, qb, kw, kb, vw, vb, ow, ob, ln1w, ln1b, sow, sob,
                  aww, awb, vpw, vpb, opw, opb, ln2w, ln2b, f1w, f1b, f2w, f2b, ln3w, ln3b, b0w, b0b, b1w, b1b, b2w,
                  b2b):
        layer = (qw, qb, kw, kb, vw, vb, ow, ob, ln1w, ln1b, sow, sob, aww, awb, vpw, vpb, opw, opb, ln2w, ln2b, f1w,
                 f1b, f2w, f2b, ln3w, ln3b)
        kn = self.kernels
        pos = mlp(kn, ref, (p0w, p0b, p1w, p1b))
        x = decoder_layer(kn, x, pos, memory, quad_to_rect(ref) if self.quads else ref, self.shapes, layer, self.heads,
                          self.points, self.act, self.eps)
        return x, ops.sigmoid(mlp(kn, x, (b0w, b0b, b1w, b1b, b2w, b2b)) + inverse_sigmoid(ref))
