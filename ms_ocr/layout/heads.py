"""Heads more than one PP-DocLayout model has: the GlobalPointer pairwise scorer (PP-DocLayoutV2's reading-order
network and PP-DocLayoutV3's decoder; transformers' PPDocLayoutV2GlobalPointer / PPDocLayoutV3GlobalPointer)."""

import mindspore as ms
from mindspore import nn, ops

from ms_ocr.nn.layers import Linear


class GlobalPointer(nn.Cell):
    """x [B, S, dim] -> pairwise logits [B, S, S], [i, j] scoring "i is read before j" for i < j; j <= i hold -1e4.
    One `dense` projection gives each row's query and key (interleaved per row as [2, head_size])."""

    def __init__(self, dim, head_size):
        super().__init__()
        self.head_size = head_size
        self.dense = Linear(dim, 2 * head_size)

    def construct(self, x):
        b, s, _ = x.shape
        qk = self.dense(x).reshape(b, s, 2, self.head_size)
        logits = ops.matmul(qk[:, :, 0], qk[:, :, 1].transpose(0, 2, 1)) / (self.head_size ** 0.5)
        lower = ops.arange(s, dtype=ms.int32)[None, :] <= ops.arange(s, dtype=ms.int32)[:, None]  # j <= i
        return ops.select(ops.broadcast_to(lower[None], logits.shape), ops.full_like(logits, -1e4), logits)
