"""PP-DocLayoutV2's reading-order network (transformers' PPDocLayoutV2ReadingOrder): a LayoutLMv3-style encoder over
the kept boxes (token, 1-D position, 2-D box and class-label embeddings; a box-relation attention bias) and a
GlobalPointer head whose pairwise logits [i, j] (i < j) score "i is read before j". Inference only, in one graph:
the token ids, positions and key mask are built from the kept count with comparisons."""

from dataclasses import dataclass

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

from ms_ocr.layout.heads import GlobalPointer
from ms_ocr.nn import functional as F
from ms_ocr.nn.layers import Embedding, LayerNorm, Linear
from ms_ocr.ops import get_activation

# additive bias of padded keys (the reference adds float32's minimum; either way their probability is exactly 0)
MASKED = -3.0e38


@dataclass
class ReadingOrderConfig:
    """PPDocLayoutV2ReadingOrderConfig fields used at inference, with the reference class's defaults."""
    hidden_size: int = 512
    num_attention_heads: int = 8
    layer_norm_eps: float = 1e-5
    intermediate_size: int = 2048
    hidden_act: str = "gelu"
    num_hidden_layers: int = 6
    has_relative_attention_bias: bool = False
    has_spatial_attention_bias: bool = True
    rel_2d_pos_bins: int = 64
    max_position_embeddings: int = 514
    max_2d_position_embeddings: int = 1024
    type_vocab_size: int = 1
    vocab_size: int = 4
    start_token_id: int = 0
    pad_token_id: int = 1
    end_token_id: int = 2
    pred_token_id: int = 3
    coordinate_size: int = 171
    shape_size: int = 170
    num_classes: int = 20
    relation_bias_embed_dim: int = 16
    relation_bias_theta: float = 10000.0
    relation_bias_scale: float = 100.0
    global_pointer_head_size: int = 64

    @classmethod
    def from_dict(cls, raw):
        cfg = cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})
        if cfg.has_relative_attention_bias or not cfg.has_spatial_attention_bias:
            raise ValueError("reading order: only the box-relation bias (the checkpoints' setting) is supported")
        return cfg


class Embeddings(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.hidden_size
        self.word_embeddings = Embedding(cfg.vocab_size, d)
        self.token_type_embeddings = Embedding(cfg.type_vocab_size, d)
        self.position_embeddings = Embedding(cfg.max_position_embeddings, d)
        self.x_position_embeddings = Embedding(cfg.max_2d_position_embeddings, cfg.coordinate_size)
        self.y_position_embeddings = Embedding(cfg.max_2d_position_embeddings, cfg.coordinate_size)
        self.h_position_embeddings = Embedding(cfg.max_2d_position_embeddings, cfg.shape_size)
        self.w_position_embeddings = Embedding(cfg.max_2d_position_embeddings, cfg.shape_size)
        self.norm = LayerNorm(d, cfg.layer_norm_eps)
        self.spatial_proj = Linear(4 * cfg.coordinate_size + 2 * cfg.shape_size, d)
        self.top = cfg.max_2d_position_embeddings - 1

    def construct(self, ids, positions, box):
        """ids, positions [B, S]; box [B, S, 4] int (x1, y1, x2, y2 on 0..1000)."""
        x1, y1, x2, y2 = box[..., 0], box[..., 1], box[..., 2], box[..., 3]
        spatial = ops.concat((self.x_position_embeddings(x1), self.y_position_embeddings(y1),
                              self.x_position_embeddings(x2), self.y_position_embeddings(y2),
                              self.h_position_embeddings(ops.clip(y2 - y1, 0, self.top)),
                              self.w_position_embeddings(ops.clip(x2 - x1, 0, self.top))), -1)
        return (self.word_embeddings(ids) + self.token_type_embeddings(ops.zeros_like(ids))
                + self.position_embeddings(positions) + self.spatial_proj(spatial))


class RelationBias(nn.Cell):
    """Box-relation attention bias [B, heads, S, S] from boxes (x1, y1, x2, y2): log-distance / log-size-ratio
    features, sin/cos at relation_bias_embed_dim/2 frequencies, a 1x1 conv to one bias per head."""

    def __init__(self, cfg):
        super().__init__()
        dim = cfg.relation_bias_embed_dim
        self.pos_proj = _Conv1x1(dim * 4, cfg.num_attention_heads)
        inv = 1.0 / (cfg.relation_bias_theta ** (np.arange(0, dim, 2, dtype=np.float32) / (dim // 2)))
        self.inv_freq = Tensor(inv.astype(np.float32))
        self.scale = cfg.relation_bias_scale

    def construct(self, boxes):
        x1, y1, x2, y2 = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
        w = ops.clip(x2 - x1, 1e-3, None)
        h = ops.clip(y2 - y1, 1e-3, None)
        c = ops.stack(((x1 + x2) * 0.5, (y1 + y2) * 0.5), -1)  # [B, S, 2]
        size = ops.stack((w, h), -1)
        eps = 1e-5
        src_c, tgt_c = c[:, :, None], c[:, None]
        src_s, tgt_s = size[:, :, None], size[:, None]
        rel = ops.concat((ops.log(ops.abs(src_c - tgt_c) / (src_s + eps) + 1.0),
                          ops.log((src_s + eps) / (tgt_s + eps))), -1)  # [B, S, S, 4]
        emb = (rel * self.scale)[..., None] * self.inv_freq  # [B, S, S, 4, F]
        emb = ops.concat((ops.sin(emb), ops.cos(emb)), -1)  # [B, S, S, 4, 2F]
        b, s = emb.shape[0], emb.shape[1]
        return self.pos_proj(emb.reshape(b, s, s, -1))


class _Conv1x1(nn.Cell):
    """A 1x1 conv applied on the last axis of [B, S, S, Cin] -> [B, Cout, S, S] (weights [Cout, Cin, 1, 1])."""

    def __init__(self, cin, cout):
        super().__init__()
        self.weight = Parameter(ops.zeros((cout, cin, 1, 1), ms.float32), name="weight")
        self.bias = Parameter(ops.zeros((cout,), ms.float32), name="bias")

    def construct(self, x):
        b, s, t, cin = x.shape
        y = F.linear(self.kernels, x.reshape(-1, cin), self.weight.reshape(self.weight.shape[0], cin), self.bias)
        return y.reshape(b, s, t, -1).transpose(0, 3, 1, 2)


class _SelfAttention(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.hidden_size
        self.heads, self.head_dim = cfg.num_attention_heads, d // cfg.num_attention_heads
        self.query, self.key, self.value = Linear(d, d), Linear(d, d), Linear(d, d)


class _Output(nn.Cell):
    def __init__(self, cin, d, eps):
        super().__init__()
        self.dense = Linear(cin, d)
        self.norm = LayerNorm(d, eps)

    def construct(self, x, residual):
        return self.norm(self.dense(x) + residual)


class _Attention(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.self = _SelfAttention(cfg)
        self.output = _Output(cfg.hidden_size, cfg.hidden_size, cfg.layer_norm_eps)


class _Intermediate(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.dense = Linear(cfg.hidden_size, cfg.intermediate_size)


class Layer(nn.Cell):
    """BERT post-norm layer; attention scores get the relation bias and the key mask."""

    def __init__(self, cfg):
        super().__init__()
        self.attention = _Attention(cfg)
        self.intermediate = _Intermediate(cfg)
        self.output = _Output(cfg.intermediate_size, cfg.hidden_size, cfg.layer_norm_eps)
        self.act = get_activation(cfg.hidden_act)

    def construct(self, x, bias):
        sa = self.attention.self
        b, s, d = x.shape

        def heads(t):
            return t.reshape(b, s, sa.heads, sa.head_dim).transpose(0, 2, 1, 3)

        # scores + relation bias + key mask ([B, H, S, S], per head) -> softmax (the reference's "cogview"
        # softmax is the same function)
        scores = ops.matmul(heads(sa.query(x)) * (sa.head_dim ** -0.5), heads(sa.key(x)).transpose(0, 1, 3, 2))
        ctx = ops.matmul(ops.softmax(scores + bias, -1), heads(sa.value(x)))
        h = self.attention.output(ctx.transpose(0, 2, 1, 3).reshape(b, s, d), x)
        return self.output(self.act(self.kernels, self.intermediate.dense(h)), h)


class _Encoder(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.layer = nn.CellList([Layer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.rel_bias_module = RelationBias(cfg)


class ReadingOrder(nn.Cell):
    """boxes [B, L, 4] (x1, y1, x2, y2 on 0..1000, kept ones first, zeros after), labels [B, L] (class_order ids),
    kept [B, L] (bool) -> order logits [B, L, L]."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embeddings = Embeddings(cfg)
        self.label_embeddings = Embedding(cfg.num_classes, cfg.hidden_size)
        self.label_features_projection = Linear(cfg.hidden_size, cfg.hidden_size)
        self.encoder = _Encoder(cfg)
        self.relative_head = GlobalPointer(cfg.hidden_size, cfg.global_pointer_head_size)

    def construct(self, boxes, labels, kept):
        cfg = self.cfg
        b, L = kept.shape
        n = kept.astype(ms.int32).sum(1, keepdims=True)  # [B, 1] kept boxes
        col = ops.arange(L + 2, dtype=ms.int32)[None]  # [1, L+2]
        ids = ops.fill(ms.int32, (b, L + 2), cfg.pad_token_id)
        ids = ops.select((col >= 1) & (col <= n), ops.full_like(ids, cfg.pred_token_id), ids)
        ids = ops.select(col == n + 1, ops.full_like(ids, cfg.end_token_id), ids)
        ids = ops.select(ops.broadcast_to(col == 0, ids.shape), ops.full_like(ids, cfg.start_token_id), ids)
        # RoBERTa positions: non-pad tokens count from pad_id + 1, pads take pad_id
        live = col <= n + 1
        positions = ops.select(live, col + cfg.pad_token_id + 1, ops.full_like(ids, cfg.pad_token_id))
        zero = ops.zeros((b, 1, 4), boxes.dtype)
        padded = ops.concat((zero, boxes, zero), 1)  # [B, L+2, 4]
        x = self.embeddings(ids, positions, padded.astype(ms.int32))  # .long() of non-negative boxes = floor
        lab = self.label_features_projection(self.label_embeddings(labels.astype(ms.int32)))
        zl = ops.zeros((b, 1, lab.shape[-1]), lab.dtype)
        x = self.embeddings.norm(x + ops.concat((zl, lab, zl), 1))
        key_mask = ops.select(live, ops.zeros(live.shape, ms.float32), ops.fill(ms.float32, live.shape, MASKED))
        bias = self.encoder.rel_bias_module(padded) + key_mask[:, None, None, :]
        for layer in self.encoder.layer:
            x = layer(x, bias)
        return self.relative_head(x[:, 1:1 + L])
