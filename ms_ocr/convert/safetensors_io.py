"""Read safetensors files (single or sharded, F32/F16/BF16/int) into NumPy without a framework.

BF16 is widened to float32 exactly by shifting its 16 bits into the high half of a float32 word, so no
numpy bfloat16 support is needed; a loader that keeps bf16 takes the bit patterns as they are (raw_bf16).
"""

import json
import mmap
import os
import struct

import numpy as np

from ms_ocr.config_utils import CheckpointError

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_, "BF16": np.uint16}


def read_header(path):
    try:
        with open(path, "rb") as f:
            raw_len = f.read(8)
            if len(raw_len) != 8:
                raise CheckpointError(f"{path} is not a safetensors file (too short)")
            (n,) = struct.unpack("<Q", raw_len)
            if n > os.path.getsize(path) - 8:
                raise CheckpointError(f"{path} is truncated or not a safetensors file")
            header = json.loads(f.read(n))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(f"{path} has a corrupt safetensors header") from None
    return header, 8 + n


def widen_bf16(bits):
    """bf16 bit patterns (uint16) -> the float32 values they hold, exactly."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def iter_file(path, raw_bf16=False):
    """Yield (name, array, dtype_tag) for each tensor of one file, in file order.

    The file is memory-mapped (copy-on-write, so arrays are writable and writes never reach the file): an array
    is a view of the map, not a copy, read from the page cache when first touched; the loader copies it once,
    into the memory the kernels read (loader.device_tensor). A tensor's pages leave this process's RSS when the
    next one is asked for (_drop_pages). BF16 arrives as float32 (an exact widening copy), or with `raw_bf16` as
    the uint16 bit patterns (a view, no copy). Don't write to a yielded array.
    """
    header, offset = read_header(path)
    size = os.path.getsize(path)
    entries = sorted(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"])
    for name, info in entries:
        tag = info["dtype"]
        if tag not in _DTYPES:
            raise CheckpointError(f"{path}: tensor {name} has unsupported dtype {tag}")
        start, end = info["data_offsets"]
        if offset + end > size:
            raise CheckpointError(f"{path} is truncated (tensor {name} runs past the end of the file)")
    if size <= offset:
        for name, info in entries:
            yield name, np.zeros(info["shape"], _DTYPES[info["dtype"]]), info["dtype"]
        return
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    whole = np.frombuffer(mapped, np.uint8)
    previous = None
    for name, info in entries:
        tag = info["dtype"]
        start, end = info["data_offsets"]
        if previous is not None:
            _drop_pages(mapped, *previous)
        raw = whole[offset + start:offset + end].view(_DTYPES[tag]).reshape(info["shape"])
        previous = (offset + start, offset + end)
        if tag == "BF16" and not raw_bf16:
            raw = widen_bf16(raw)
        yield name, raw, tag


def _drop_pages(mapped, start, end):
    """Unmap the pages of a tensor the caller has consumed (MADV_DONTNEED): they stay in the page cache, out of
    this process's RSS, so a load holds one tensor's mapped pages at a time, not the whole file. Touching them
    again reads the file again (nothing is ever written to this private map), so a caller that keeps an array
    still sees its values."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return
    lo = start - start % mmap.PAGESIZE
    hi = min(-(-end // mmap.PAGESIZE) * mmap.PAGESIZE, len(mapped))
    if hi > lo:
        mapped.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


def weight_files(model_dir):
    """The safetensors files of a checkpoint folder: from model.safetensors.index.json, else *.safetensors."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map", {})
        files = sorted(set(weight_map.values()))
        missing = [fn for fn in files if not os.path.isfile(os.path.join(model_dir, fn))]
        if missing:
            raise CheckpointError(f"shard(s) listed in the index are missing from {model_dir}: {', '.join(missing)}")
        return [os.path.join(model_dir, fn) for fn in files]
    files = sorted(fn for fn in os.listdir(model_dir) if fn.endswith(".safetensors"))
    if not files:
        raise CheckpointError(f"no *.safetensors weights in {model_dir}")
    return [os.path.join(model_dir, fn) for fn in files]


def has_weights(model_dir):
    """Whether a folder holds safetensors weights (an index or any *.safetensors file)."""
    return os.path.isfile(os.path.join(model_dir, "model.safetensors.index.json")) or any(
        fn.endswith(".safetensors") for fn in os.listdir(model_dir))


def iter_checkpoint(model_dir, raw_bf16=False):
    for path in weight_files(model_dir):
        yield from iter_file(path, raw_bf16)


def save_file(tensors, path, metadata=None):
    """Write {name: ndarray | (ndarray, tag)} as a standard safetensors file.

    A float32 array tagged "BF16" (as `iter_file` returns bf16 tensors) is stored back as bf16 exactly.
    """
    rev = {np.dtype(v): k for k, v in _DTYPES.items() if k != "BF16"}
    header, offset, arrays = {}, 0, []
    for name, item in tensors.items():
        arr, tag = item if isinstance(item, tuple) else (item, None)
        arr = np.ascontiguousarray(arr)
        if tag == "BF16":
            arr = (arr.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        else:
            tag = rev[arr.dtype]
        header[name] = {"dtype": tag, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
        arrays.append(arr)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for arr in arrays:
            f.write(arr.tobytes())
    os.replace(tmp, path)


def tensor_index(model_dir):
    """{name: (path, header entry, data start)} over every file of a checkpoint, from the headers only."""
    index = {}
    for path in weight_files(model_dir):
        header, offset = read_header(path)
        for name, info in header.items():
            if name != "__metadata__":
                index[name] = (path, info, offset)
    return index


def read_tensor(entry):
    """The float32 (or integer) array of one `tensor_index` entry."""
    path, info, offset = entry
    start, end = info["data_offsets"]
    with open(path, "rb") as f:
        f.seek(offset + start)
        raw = np.frombuffer(f.read(end - start), dtype=_DTYPES[info["dtype"]]).reshape(info["shape"])
    return widen_bf16(raw) if info["dtype"] == "BF16" else raw


def same_values(a, b, chunk=64 << 20):
    """Whether two `tensor_index` entries hold equal values: bytes compared chunk by chunk when they share dtype
    and shape (no decode, bounded memory), else compared as float32."""
    (pa, ia, oa), (pb, ib, ob) = a, b
    if list(ia["shape"]) != list(ib["shape"]):
        return False
    if ia["dtype"] != ib["dtype"]:
        return bool(np.array_equal(read_tensor(a).astype(np.float32), read_tensor(b).astype(np.float32)))
    (sa, ea), (sb, eb) = ia["data_offsets"], ib["data_offsets"]
    with open(pa, "rb") as fa, open(pb, "rb") as fb:
        fa.seek(oa + sa)
        fb.seek(ob + sb)
        left = ea - sa
        while left > 0:
            n = min(chunk, left)
            if fa.read(n) != fb.read(n):
                return False
            left -= n
    return True


def checkpoint_dtypes(model_dir):
    """The set of dtype tags (F32, BF16, ...) of a checkpoint's tensors, from the headers only."""
    tags = set()
    for path in weight_files(model_dir):
        header, _ = read_header(path)
        tags.update(v["dtype"] for k, v in header.items() if k != "__metadata__")
    return tags
