"""--quantize int8 as the weights are read: symmetric int8 with one fp32 scale per output row (scale = max|row| / 127,
q = round(w / scale)) or per group of columns (int8-g64 / int8-g32), made from the checkpoint's own values on the
native kernels' threads where the library loads, else with NumPy. Which Parameters are quantised is the model's
(ms_ocr/models/quantize.py prepare_int8, an Int8Plan); the loader (convert/loader.py) quantises them here as it reads
them, so their float matrices are never allocated."""

import numpy as np

from ms_ocr.convert.safetensors_io import widen_bf16
from ms_ocr.ops import native


def quantize_rows(w, out=None, group=0):
    """w [N, K] (float) -> (q int8 [N, K], scale fp32): symmetric int8, rounding to nearest even, one scale per row
    ([N]) or, with `group`, per group of `group` columns ([N, K / group]; K a multiple of it). `out`: an int8 array
    [N, K] to write q into (returned as q)."""
    w = np.array(w, np.float32)  # a copy, worked on in place
    n, k = w.shape
    runs = w.reshape(n * k // group, group) if group else w  # a scale's columns per row of `runs`
    # max |w| per run: one pass over |w| for short runs (groups: faster than max and min), two for long rows
    peak = np.abs(runs).max(1) if group else np.maximum(runs.max(1), -runs.min(1))
    scale = peak / np.float32(127)
    scale[scale == 0] = 1
    np.divide(runs, scale[:, None], out=runs)
    np.rint(w, out=w)
    np.clip(w, -127, 127, out=w)
    scale = scale.reshape(n, k // group) if group else scale
    if out is None:
        return w.astype(np.int8), scale.astype(np.float32)
    out[...] = w
    return out, scale.astype(np.float32)


def _native_kernels():
    """The native kernel library when it is loaded or loadable (quantize_array's fast path), else None (NumPy)."""
    return native.load()


CHUNK_ROWS = 4096  # rows widened to fp32 at a time (a 103,424-row head would be a 424 MB fp32 copy at once)


def quantize_array(arr, out=None, group=0):
    """A checkpoint tensor [..., N, K] (float, or raw bf16 words as uint16; a stack of experts [E, N, K] is E
    matrices) -> quantize_rows, row chunk by row chunk, into `out` (an int8 array of its shape, e.g. a view of the
    pool tensor it is for: no second copy) or a new array. Returns (q, scales [..., N] or [..., N, K / group])."""
    out = np.empty(arr.shape, np.int8) if out is None else out
    k = arr.shape[-1]
    if group and k % group:
        raise ValueError(f"int8-g{group}: {k} columns are not a multiple of {group}")
    rows_in, rows_out = arr.reshape(-1, k), out.reshape(-1, k)  # views (contiguous arrays)
    n = rows_in.shape[0]
    scales = np.empty((n, k // group) if group else n, np.float32)
    kernels = _native_kernels()
    if kernels is not None:  # the same values on the kernels' threads, without an fp32 copy of bf16 rows
        if rows_in.dtype not in (np.float32, np.uint16):
            rows_in = rows_in.astype(np.float32)
        kernels.quantize_rows(np.ascontiguousarray(rows_in), rows_out, scales.reshape(-1), group or k)
        return out, scales.reshape(arr.shape[:-1] + ((k // group,) if group else ()))
    for start in range(0, n, CHUNK_ROWS):
        rows = rows_in[start:start + CHUNK_ROWS]
        _, scales[start:start + len(rows)] = quantize_rows(widen_bf16(rows) if rows.dtype == np.uint16 else rows,
                                                           rows_out[start:start + len(rows)], group)
    return out, scales.reshape(arr.shape[:-1] + ((k // group,) if group else ()))


class Int8Plan:
    """What prepare_int8 marked: `scales` {weight Parameter name: its scale Parameter}, `made` (the names of the
    scale Parameters it added), `group` (columns per scale, 0: one per row). Empty (false) when there is nothing to
    quantise."""

    def __init__(self, scales=None, made=(), group=0):
        self.scales, self.made, self.group = dict(scales or {}), set(made), group

    def __bool__(self):
        return bool(self.scales)
