"""What the runtime takes from the host side (plain data, no framework): shape buckets, one image's arrays, one
prepared request."""

from dataclasses import dataclass, field

import numpy as np


class RequestTooLong(ValueError):
    pass


@dataclass
class Buckets:
    """Granularity of the padded shapes graphs are compiled for (each new bucket compiles once)."""
    prefill: int = 128
    slots: int = 256


@dataclass
class VisionInputs:
    """One image's host arrays: for the model's vision_embed and for its vision_head (after the layers)."""
    embed: tuple
    head: tuple


@dataclass
class Prepared:
    """One request after preprocessing: token ids, rope positions [A, S], and the rope delta of decode."""
    input_ids: np.ndarray
    position_ids: np.ndarray
    rope_delta: int
    image_token_mask: np.ndarray
    vision_inputs: list = field(default_factory=list)
