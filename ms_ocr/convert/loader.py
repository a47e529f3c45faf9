"""Strict loading of renamed checkpoint tensors into a Cell: missing or unexpected keys are errors."""

import ctypes

import numpy as np
import mindspore as ms
from mindspore import Tensor, mint

from ms_ocr.config_utils import CheckpointError
from ms_ocr.convert.quantize import Int8Plan, quantize_array
from ms_ocr.convert.safetensors_io import widen_bf16
from ms_ocr.convert.hugepages import prepare_fresh


_HAVE_EMPTY = hasattr(mint, "empty") and hasattr(Tensor, "data_ptr")


_MS_DTYPES = {"f4": ms.float32, "f2": ms.float16, "f8": ms.float64, "i8": ms.int64, "i4": ms.int32, "i2": ms.int16,
              "i1": ms.int8, "u1": ms.uint8, "b1": ms.bool_, "u2": ms.uint16}


def is_state(name):
    """Runtime state Parameters (KV caches) that checkpoints never carry."""
    return name.endswith("_cache")


def round_to_bf16(arr):
    """Round float32 to the nearest bfloat16 (ties to even) and widen back to float32."""
    bits = np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32)


def round_weights(arr, round_to):
    if round_to == "bf16":
        return round_to_bf16(arr)
    if round_to == "fp16":
        return np.asarray(arr, np.float16).astype(np.float32)
    return np.asarray(arr, np.float32)


def _listing(names, limit=12):
    names = sorted(names)
    more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _keeps_bf16(local, keep_bf16, values_bf16, round_to):
    """Whether a Parameter is stored bf16-resident: named in `keep_bf16` and holding only bf16 values (every
    source tensor BF16, or rounded to bf16). One rule for plain and stacked (per-expert) Parameters."""
    return local in keep_bf16 and (values_bf16 or round_to == "bf16")


def bf16_bits(arr):
    """float32 values that are bf16 values (widened or rounded) -> their uint16 bit patterns, exactly."""
    return (np.ascontiguousarray(arr, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def device_tensor(arr, dtype):
    """A Tensor in MindSpore's memory pool holding `arr`'s bytes as `dtype`, made with one copy (from the
    checkpoint's memory map, or the one buffer a widening made). The weight must live in the pool: a Tensor
    that only wraps host memory (Tensor(ndarray), Tensor.from_numpy) is copied into the pool by every graph that
    uses it (measured on PaddleOCR-VL: more memory and a much slower decode); Tensor(ndarray).astype(...) gets
    there through a MindSpore cast (bf16: a scalar kernel, most of a model's load). So: an uninitialised
    pool tensor (pool_array) and one copy into it. Older MindSpore without mint.empty: the cast route."""
    arr = np.ascontiguousarray(arr)
    if _HAVE_EMPTY:
        t, view = pool_array(arr.shape, dtype, arr.dtype)
        view[...] = arr
        return t
    if dtype == ms.bfloat16:
        return Tensor(widen_bf16(arr) if arr.dtype == np.uint16 else arr).astype(ms.bfloat16)
    return Tensor(arr).astype(dtype)


def pool_array(shape, dtype, np_dtype):
    """(Tensor in MindSpore's memory pool, a writable numpy view of its memory): fill the view, adopt the Tensor,
    and a weight made on the host (an int8 matrix quantised row chunk by chunk) never needs a second copy. Older
    MindSpore without mint.empty: (None, a numpy array) to pass to device_tensor."""
    if not _HAVE_EMPTY:
        return None, np.empty(shape, np_dtype)
    t = mint.empty(tuple(shape), dtype=dtype)
    nbytes = int(np.prod(shape)) * np.dtype(np_dtype).itemsize
    prepare_fresh(t.data_ptr(), nbytes)
    buf = (ctypes.c_char * nbytes).from_address(t.data_ptr()) if nbytes else bytearray()
    return t, np.frombuffer(buf, np_dtype).reshape(shape)


def adopt(param, tensor):
    """Make `tensor` the Parameter's data as it is. Parameter.set_data would cast to the Parameter's declared
    dtype (a copy through a MindSpore op) and set_dtype materialises the lazy zeros first (seconds of a load);
    assign_value (what set_data ends in) takes the tensor as it is. Older MindSpore: set_data."""
    if hasattr(param, "_update_tensor_data") and hasattr(param, "assign_value"):
        param._update_tensor_data(tensor)
    else:
        param.set_dtype(tensor.dtype)
        param.set_data(tensor)


def _store(param, arr, dtype):
    """Set `param` to `arr` in `dtype` (None: as it is), materialised once, in that dtype: a uint16 `arr` holds
    bf16 bit patterns (a raw checkpoint view, copied as it is for a bf16 Parameter); float32 values go to bf16
    by their bit patterns (they are bf16 values: rounded or read from a BF16 tensor) and to fp16 by numpy."""
    arr = np.asarray(arr)
    if arr.dtype == np.uint16 and dtype != ms.bfloat16:  # bf16 bits for an fp32/fp16 Parameter: widen once
        arr = widen_bf16(arr)
    if dtype == ms.bfloat16:
        adopt(param, device_tensor(arr if arr.dtype == np.uint16 else bf16_bits(arr), ms.bfloat16))
    elif dtype == ms.float16:
        adopt(param, device_tensor(np.asarray(arr, np.float16), ms.float16))
    elif dtype is None:
        adopt(param, device_tensor(arr, _MS_DTYPES[arr.dtype.str[1:]]))
    else:
        adopt(param, device_tensor(np.asarray(arr, np.float32), ms.float32))


def _quantize_into(arr, out, round_to, group):
    """--quantize int8: checkpoint tensor `arr` (raw bf16 words, or values to round as `round_to` says) quantised
    into the int8 array `out` (convert/quantize.py quantize_array); returns its scales."""
    raw = arr.dtype == np.uint16 and round_to in (None, "bf16")
    return quantize_array(arr if raw else round_weights(widen_bf16(arr) if arr.dtype == np.uint16 else arr, round_to),
                          out, group)[1]


class _Stack:
    """The slices of one stacked (per-expert) Parameter as they arrive from the checkpoint. Raw bf16 slices of a
    Parameter kept in bf16 go straight into its pool tensor at their offset: no buffer, no widening and
    rounding back (where DeepSeek-OCR-2's load spent most of its time). Otherwise, or from the first slice that is
    not raw bf16, a float32 buffer is filled and stored when complete. A stack quantised by --quantize int8
    (`int8_group`: columns per scale, 0 one per row): each slice quantised into the int8 pool tensor as it
    arrives, its scales beside."""

    def __init__(self, shape, raw, int8_group=None):
        self.shape = tuple(shape)
        self.tensor, self.buf, self.group = None, None, int8_group
        if int8_group is not None:
            self.tensor, self.q = pool_array(self.shape, ms.int8, np.int8)
            k = self.shape[-1]
            self.scales = np.empty(self.shape[:-1] + ((k // int8_group,) if int8_group else ()), np.float32)
        elif raw and _HAVE_EMPTY:
            self.tensor = mint.empty(self.shape, dtype=ms.bfloat16)
            count = int(np.prod(self.shape))
            prepare_fresh(self.tensor.data_ptr(), 2 * count)
            self.bits = np.ctypeslib.as_array((ctypes.c_uint16 * count).from_address(self.tensor.data_ptr()))
            self.bits = self.bits.reshape(self.shape) if count else np.zeros(self.shape, np.uint16)
        else:
            self.buf = np.zeros(self.shape, np.float32)

    def put(self, index, arr, round_to):
        if self.group is not None:
            self.scales[index] = _quantize_into(arr, self.q[index], round_to, self.group)
            return
        if self.tensor is not None and arr.dtype == np.uint16:
            self.bits[index] = arr
            return
        if self.tensor is not None:  # mixed: what is there, widened, and float32 from here on
            self.buf = widen_bf16(np.array(self.bits))
            self.tensor = self.bits = None
        self.buf[index] = round_weights(widen_bf16(arr) if arr.dtype == np.uint16 else arr, round_to)

    def store(self, param, dtype, scale=None):
        if self.group is not None:
            adopt(param, self.tensor if self.tensor is not None else device_tensor(self.q, ms.int8))
            adopt(scale, device_tensor(self.scales, ms.float32))
            self.tensor = self.q = self.scales = None
            return
        if self.tensor is not None and dtype == ms.bfloat16:
            self.bits = None
            adopt(param, self.tensor)
        else:
            _store(param, self.buf if self.tensor is None else np.array(self.bits), dtype)
        self.tensor = self.bits = self.buf = None


def load_weights(net, tensors, convert_name, compute_dtype=ms.float32, round_to=None, source="", keep_bf16=(),
                 only=None, int8=None):
    """Set every weight Parameter of `net` from (hf_name, array, tag) triples.

    `convert_name(hf_name)` gives the local name or None for keys the reference ignores. Float tensors
    are stored in `compute_dtype` (fp32 on CPU); with `round_to` ("bf16"/"fp16") they are first rounded
    to that precision, which is how half-precision inference is emulated on CPU. Parameters named in
    `keep_bf16` are stored in bf16 instead when their values are bf16 (a BF16 tensor, or rounded to bf16):
    exactly the same values at half the memory (plan.bf16_resident). `only`: load just these Parameters
    (strictly: each must be found) and pass over tensors of the others, for a load in stages. `int8`: an Int8Plan
    (models/quantize.py prepare_int8): the weights it names are quantised as they are read (after
    `round_to`), stored int8 with their per-row scales; the scale Parameters are not checkpoint tensors. Returns the
    set of source dtype tags seen.
    """
    plan = int8 or Int8Plan()
    int8 = plan.scales
    params = {p.name: p for p in net.get_parameters() if not is_state(p.name) and p.name not in plan.made}
    elsewhere = set()
    if only is not None:
        elsewhere = set(params) - set(only)
        params = {n: p for n, p in params.items() if n in only}
    loaded, unexpected, tags = set(), [], set()
    stacked = {}  # local name -> (float32 buffer [E, ...], set of filled slices)
    stacked_not_bf16 = set()  # stacked Parameters with a slice that was not stored as bf16
    for hf_name, arr, tag in tensors:
        local = convert_name(hf_name)
        if local is None:
            continue
        if (local[0] if isinstance(local, tuple) else local) in elsewhere:  # another stage's
            continue
        if isinstance(local, tuple):  # one slice of a stacked Parameter
            local, index = local
            param = params.get(local)
            if param is None or not 0 <= index < param.shape[0]:
                unexpected.append(f"{hf_name} -> {local}[{index}]")
                continue
            if tuple(arr.shape) != tuple(param.shape[1:]):
                raise CheckpointError(f"{source}: {hf_name} has shape {tuple(arr.shape)}, the model expects "
                                      f"{tuple(param.shape[1:])} (checkpoint and config.json disagree)")
            if local not in stacked:
                raw = arr.dtype == np.uint16 and round_to in (None, "bf16") and (
                    compute_dtype == ms.bfloat16 or _keeps_bf16(local, keep_bf16, True, round_to))
                stacked[local] = (_Stack(param.shape, raw, plan.group if local in int8 else None), set())
            buf, filled = stacked[local]
            if buf is None or index in filled:
                raise CheckpointError(f"{source}: two checkpoint tensors map to {local}[{index}]")
            buf.put(index, arr, round_to)
            filled.add(index)
            tags.add(tag)
            if tag != "BF16":
                stacked_not_bf16.add(local)
            if len(filled) == param.shape[0]:  # complete: hand it over now so only one buffer is alive at a time
                bf16 = _keeps_bf16(local, keep_bf16, local not in stacked_not_bf16, round_to)
                buf.store(param, ms.bfloat16 if bf16 else compute_dtype, int8.get(local))
                loaded.add(local)
                stacked[local] = (None, filled)
            continue
        param = params.get(local)
        if param is None:
            unexpected.append(hf_name if hf_name == local else f"{hf_name} -> {local}")
            continue
        if local in loaded:
            raise CheckpointError(f"{source}: two checkpoint tensors map to {local}")
        if tuple(arr.shape) != tuple(param.shape):
            raise CheckpointError(f"{source}: {hf_name} has shape {tuple(arr.shape)}, the model expects "
                                  f"{tuple(param.shape)} (checkpoint and config.json disagree)")
        tags.add(tag)
        if local in int8:  # --quantize int8: straight from the checkpoint's values to int8 + row / group scales
            pooled, view = pool_array(arr.shape, ms.int8, np.int8)
            scale = _quantize_into(arr, view, round_to, plan.group)
            adopt(param, pooled if pooled is not None else device_tensor(view, ms.int8))
            adopt(int8[local], device_tensor(scale, ms.float32))
        elif tag == "BF16" and arr.dtype == np.uint16:  # raw bf16 bits (iter_checkpoint(raw_bf16=True))
            if round_to in (None, "bf16") and (compute_dtype == ms.bfloat16 or _keeps_bf16(local, keep_bf16, True,
                                                                                         round_to)):
                _store(param, arr, ms.bfloat16)  # the checkpoint's bits as they are: no widening
            else:
                _store(param, round_weights(widen_bf16(arr), round_to), compute_dtype)
        elif np.issubdtype(arr.dtype, np.floating):
            bf16 = _keeps_bf16(local, keep_bf16, tag == "BF16", round_to)
            _store(param, round_weights(arr, round_to), ms.bfloat16 if bf16 else compute_dtype)
        else:
            _store(param, np.asarray(arr), None)
        loaded.add(local)
    for local, (buf, filled) in stacked.items():
        if buf is not None:  # incomplete
            absent = sorted(set(range(buf.shape[0])) - filled)
            unexpected_missing = f"{local}[{', '.join(map(str, absent[:8]))}{', ...' if len(absent) > 8 else ''}]"
            loaded.add(local)
            unexpected.append(f"(missing slices) {unexpected_missing}")
    missing = set(params) - loaded
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} key(s): {_listing(missing)}")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} key(s): {_listing(unexpected)}")
        raise CheckpointError(f"{source}: weights do not match the model; " + "; ".join(parts))
    return tags
