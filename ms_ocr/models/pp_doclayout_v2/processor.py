"""PP-DocLayoutV2 pre- and post-processing: transformers' PPDocLayoutV2ImageProcessor (its torchvision backend:
uint8 bicubic resize without antialiasing to 800x800, rescale+normalise fused as a division) and its
post_process_object_detection (sigmoid scores, top-k over queries x labels, threshold, reading-order sort)."""

import os
from dataclasses import dataclass

import numpy as np

from ms_ocr.config_utils import CheckpointError, read_json
from ms_ocr.models.pp_doclayout_v2.reading_order import order_from_logits
from ms_ocr.processing.image import to_rgb
from ms_ocr.processing.resample import resize_bicubic_uint8

BICUBIC = 3  # PIL's resample id; the only resize the reference class uses


@dataclass
class LayoutPreprocessConfig:
    height: int = 800
    width: int = 800
    do_resize: bool = True
    do_rescale: bool = True
    rescale_factor: float = 1 / 255
    do_normalize: bool = True
    image_mean: tuple = (0.0, 0.0, 0.0)
    image_std: tuple = (1.0, 1.0, 1.0)

    @classmethod
    def from_dict(cls, raw):
        """The hub's preprocessor_config.json; the reference class's defaults for omitted fields."""
        out = cls()
        size = raw.get("size") or {}
        if size and not ("height" in size and "width" in size):
            raise CheckpointError(f"preprocessor_config.json: size {size} needs height and width (the layout model "
                                  "resizes to a fixed size)")
        if size:
            out.height, out.width = int(size["height"]), int(size["width"])
        if raw.get("resample", BICUBIC) != BICUBIC:
            raise CheckpointError(f"preprocessor_config.json: resample {raw['resample']} is not supported (bicubic, 3)")
        for name in ("do_resize", "do_rescale", "rescale_factor", "do_normalize"):
            if raw.get(name) is not None:
                setattr(out, name, type(getattr(out, name))(raw[name]))
        for name in ("image_mean", "image_std"):
            if raw.get(name) is not None:
                value = raw[name]
                setattr(out, name, tuple(float(v) for v in (value if isinstance(value, (list, tuple)) else [value] * 3)))
        return out

    @classmethod
    def from_dir(cls, model_dir):
        path = os.path.join(model_dir, "preprocessor_config.json")
        return cls.from_dict(read_json(path)) if os.path.isfile(path) else cls()


def preprocess(image, pcfg):
    """PIL image -> pixel_values [1, 3, H, W] float32 (RGB)."""
    pixels = np.asarray(to_rgb(image), np.uint8)
    if pcfg.do_resize:
        pixels = resize_bicubic_uint8(pixels, pcfg.height, pcfg.width)
    x = pixels.astype(np.float32)
    mean, std = np.asarray(pcfg.image_mean, np.float32), np.asarray(pcfg.image_std, np.float32)
    if pcfg.do_rescale and pcfg.do_normalize:
        # the reference fuses both into one normalise: mean / factor and std / factor, then (x - mean) / std
        inv = np.float32(1.0 / pcfg.rescale_factor)
        x = (x - mean * inv) / (std * inv)
    elif pcfg.do_normalize:
        x = (x - mean) / std
    elif pcfg.do_rescale:
        x = x * np.float32(pcfg.rescale_factor)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def postprocess(logits, boxes, order_logits, target_sizes=None, threshold=0.5):
    """The model's outputs (kept-first query order) -> per image dict(scores, labels, boxes (x1, y1, x2, y2, in
    pixels of target_sizes' (h, w), else in [0, 1]), order_seq), sorted by reading order.

    As the reference: every query x label pair competes in one top-k of num_queries (a query may come out with two
    labels), and the reading order of a pair is its query's rank. `threshold` is one score or one per label id."""
    logits, boxes = np.asarray(logits, np.float32), np.asarray(boxes, np.float32)
    b, q, c = logits.shape
    ranks = order_from_logits(np.asarray(order_logits))
    xyxy = np.concatenate([boxes[..., :2] - 0.5 * boxes[..., 2:], boxes[..., :2] + 0.5 * boxes[..., 2:]], -1)
    if target_sizes is not None:
        if len(target_sizes) != b:
            raise ValueError("postprocess: one target size per image is needed")
        hw = np.asarray(target_sizes, np.float32)
        xyxy = xyxy * np.stack([hw[:, 1], hw[:, 0], hw[:, 1], hw[:, 0]], 1)[:, None, :]
    with np.errstate(over="ignore"):
        scores = (1.0 / (1.0 + np.exp(-logits))).reshape(b, -1)
    per_label = np.broadcast_to(np.asarray(threshold, np.float32), (c,)) if np.ndim(threshold) else None
    results = []
    for i in range(b):
        top = np.argsort(-scores[i], kind="stable")[:q]
        score, label, query = scores[i, top], top % c, top // c
        cut = per_label[label] if per_label is not None else np.float32(threshold)
        keep = score >= cut
        order = ranks[i, query][keep]
        sort = np.argsort(order, kind="stable")
        results.append({"scores": score[keep][sort], "labels": label[keep][sort], "boxes": xyxy[i, query][keep][sort],
                        "order_seq": order[sort]})
    return results
