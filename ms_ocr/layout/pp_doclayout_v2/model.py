"""PP-DocLayoutV2 end to end (transformers' PPDocLayoutV2ForObjectDetection at inference): the detector, then the
per-class thresholds, kept queries moved to the front, class ids mapped through class_order, and the
reading-order network over the kept boxes.

Deviation: the reference moves kept queries to the front with torch.argsort, which is not stable on CPU (tied keys
come out in an implementation-defined order) and the reading order depends on that order through its position
ids; here the kept queries keep their query order (a stable sort). Tests compare against the reference with a
stable argsort."""

import numpy as np
import mindspore as ms
from mindspore import Tensor, ops

from ms_ocr.layout.decoder import refine
from ms_ocr.layout.detector import Detector, LayoutModel, take_rows as _take
from ms_ocr.layout.pp_doclayout_v2.reading_order import ReadingOrder


class PPDocLayoutV2(LayoutModel):
    """pixel_values -> (logits [B, Q, C], boxes [B, Q, 4] (cx, cy, w, h in [0, 1]), order_logits [B, Q, Q], kept
    [B, Q]), all in the kept-first query order."""

    def __init__(self, cfg):
        super().__init__(Detector(cfg))
        self.reading_order = ReadingOrder(cfg.reading_order)
        self.thresholds = Tensor(np.asarray(cfg.class_thresholds, np.float32))
        self.class_order = Tensor(np.asarray(cfg.class_order, np.int32))

    def back(self, x, raw, extra=None, coords=None):
        """The last decoder layer's states and boxes -> the outputs (see the class)."""
        logits = self.model.head(x)
        q = logits.shape[1]
        xyxy = ops.concat((raw[..., :2] - 0.5 * raw[..., 2:], raw[..., :2] + 0.5 * raw[..., 2:]), -1) * 1000
        xyxy = ops.clip(xyxy, 0.0, 1000.0)
        best, cls = ops.max(logits, -1)
        kept = ops.sigmoid(best) >= ops.gather(self.thresholds, cls, 0)
        # kept queries first, each group in query order (stable)
        key = (1 - kept.astype(ms.int32)) * q + ops.arange(q, dtype=ms.int32)[None]
        _, order = ops.sort(key.astype(ms.float32), -1)
        order = order.astype(ms.int32)
        cls, xyxy, raw, logits, kept = _take(cls, order), _take(xyxy, order), _take(raw, order), _take(logits, order), \
            _take(kept, order)
        pad_boxes = ops.select(ops.broadcast_to(kept[..., None], xyxy.shape), xyxy, ops.zeros_like(xyxy))
        pad_cls = ops.gather(self.class_order, ops.select(kept, cls.astype(ms.int32), ops.zeros_like(cls, dtype=ms.int32)), 0)
        order_logits = self.reading_order(pad_boxes, pad_cls, kept)
        return logits, raw, order_logits, kept

    def construct(self, pixel_values, pos, anchor_logits, valid, shapes):
        m = self.model
        target, ref, memory, _ = m.front(pixel_values, pos, anchor_logits, valid)
        x, ref = refine(m.decoder, m.decoder.bbox_embed, True, target, memory, ref, shapes)
        return self.back(x, ref)
