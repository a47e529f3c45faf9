"""Weight-only int8 in the tests: the dequantised values a quantised matrix stands for."""

import numpy as np


def dequantized(q, scale):
    """float64 q * scale, scale [N] (per row) or [N, K / G] (per group of G columns)"""
    s = scale.astype(np.float64)
    return q.astype(np.float64) * (s[:, None] if s.ndim == 1 else np.repeat(s, q.shape[1] // s.shape[1], 1))
