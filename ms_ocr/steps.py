"""Graph entry points shared by the VLMs: vision, prefill, decode and full-logits steps.

Each wraps a model Cell that provides `encode_images(*vision_inputs)`, `embed(input_ids)`,
`text(x, pos, cache_pos)` and `logits(h)`. They are built with auto_prefix=False so wrapping does not
rename the model's parameters; each compiles once per input-shape bucket and is reused.
"""

import mindspore as ms
from mindspore import nn, ops


class VisionStep(nn.Cell):
    def __init__(self, model):
        super().__init__(auto_prefix=False)
        self.model = model

    def construct(self, *inputs):
        return self.model.encode_images(*inputs)


def merge_image_features(embeds, image_feats, image_index):
    """Put image feature row image_index[b, s] at every position where it is >= 0."""
    picked = ops.gather(image_feats, ops.maximum(image_index, 0), 0)  # [B, S, H]
    return ops.select(ops.broadcast_to((image_index >= 0)[..., None], embeds.shape), picked.astype(embeds.dtype),
                      embeds)


class PrefillStep(nn.Cell):
    """Prompt (with image features) -> caches written, logits of each sequence's last real token [B, V]."""

    def __init__(self, model):
        super().__init__(auto_prefix=False)
        self.model = model

    def construct(self, input_ids, image_feats, image_index, pos, cache_pos, last_idx):
        x = merge_image_features(self.model.embed(input_ids), image_feats, image_index)
        h = self.model.text(x, pos, cache_pos)
        b, s, d = h.shape
        rows = ops.arange(b, dtype=ms.int32) * s + last_idx.astype(ms.int32)
        return self.model.logits(ops.gather(h.reshape(b * s, d), rows, 0))


class FullLogitsStep(nn.Cell):
    """Like PrefillStep but returns logits for every position [B, S, V] (parity tests, dumps)."""

    def __init__(self, model):
        super().__init__(auto_prefix=False)
        self.model = model

    def construct(self, input_ids, image_feats, image_index, pos, cache_pos):
        x = merge_image_features(self.model.embed(input_ids), image_feats, image_index)
        h = self.model.text(x, pos, cache_pos)
        b, s, d = h.shape
        return self.model.logits(h.reshape(b * s, d)).reshape(b, s, -1)


class DecodeStep(nn.Cell):
    """One new token per sequence: input_ids [B, 1], pos [A, B, 1], cache_pos [B, 1] -> logits [B, V]."""

    def __init__(self, model):
        super().__init__(auto_prefix=False)
        self.model = model

    def construct(self, input_ids, pos, cache_pos):
        h = self.model.text(self.model.embed(input_ids), pos, cache_pos)
        return self.model.logits(h[:, 0])
