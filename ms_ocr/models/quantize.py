"""--quantize int8: weight-only int8 for the decoder, made at load time from the checkpoint's own values (no new
files). Each matrix of a dense SiLU-gated decoder layer (q, k, v, o, gate, up, down: the layers the native decode
kernel serves) and the head become int8 with one fp32 scale per output row (symmetric: scale = max|row| / 127,
q = round(w / scale)); a row of a product is scale * (x . q). A decode step reads the int8 matrices as they are
(DecodeLayer, MatMulTQ8: half the bytes of bf16); prefill dequantises a layer's matrices to fp32 as it runs them
(DequantQ8), so prompts compute on the dequantised values. A tied head is the embedding table: that table becomes
int8 (the head reads it through MatMulTQ8, the lookup gathers int8 rows and scales them), so prompt and decode both
see the dequantised table. A MoE decoder's routed experts (DeepSeek-OCR: most of its weights) become int8 where the
native MoeExperts kernel reads them (decode), each expert dequantised as it runs for a prompt. Vision, an untied
model's embeddings, norms, a MoE decoder's attention, dense and shared-expert layers stay as they are. CPU only: on
Ascend the corresponding path is MindSpore Golden Stick's weight-only quantisation with the NPU's quantised matmul,
not run yet.

`int8-g64` / `int8-g32`: the same with one scale per group of 64 / 32 consecutive columns of a row (llama.cpp's
Q8_0 is groups of 32) instead of one per row: a row's large weights no longer set the step of all its others, for
1/16 or 1/8 more bytes per weight (fp32 scales). The command lines read MODES without importing the framework."""

MODES = ("none", "int8", "int8-g64", "int8-g32")
KV_CACHE_DTYPES = ("auto", "fp32", "bf16")  # --kv-cache-dtype's choices (ms_ocr.device.resolve_kv_dtype)
GROUPS = {"int8": 0, "int8-g64": 64, "int8-g32": 32}  # columns per scale (0: one scale per row)


def quantize_rows(w, out=None, group=0):
    """w [N, K] (float) -> (q int8 [N, K], scale fp32): symmetric int8, rounding to nearest even, one scale per row
    ([N]) or, with `group`, per group of `group` columns ([N, K / group]; K a multiple of it). `out`: an int8 array
    [N, K] to write q into (returned as q)."""
    import numpy as np
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


CHUNK_ROWS = 4096  # rows widened to fp32 at a time (a 103,424-row head would be a 424 MB fp32 copy at once)


def _native_kernels():
    """The native kernel library when it is loaded or loadable (quantize_array's fast path), else None (NumPy)."""
    from ms_ocr.ops import native
    return native.load()


def quantize_array(arr, out=None, group=0):
    """A checkpoint tensor [..., N, K] (float, or raw bf16 words as uint16; a stack of experts [E, N, K] is E
    matrices) -> quantize_rows, row chunk by row chunk, into `out` (an int8 array of its shape, e.g. a view of the
    pool tensor it is for: no second copy) or a new array. Returns (q, scales [..., N] or [..., N, K / group])."""
    import numpy as np

    from ms_ocr.convert.safetensors_io import widen_bf16
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


def quantizable(layer):
    return not layer.moe and layer.silu_mlp


class Int8Plan:
    """What prepare_int8 marked: `scales` {weight Parameter name: its scale Parameter}, `made` (the names of the
    scale Parameters it added), `group` (columns per scale, 0: one per row). Empty (false) when there is nothing to
    quantise."""

    def __init__(self, scales=None, made=(), group=0):
        self.scales, self.made, self.group = dict(scales or {}), set(made), group

    def __bool__(self):
        return bool(self.scales)


def _placeholder(name):
    import numpy as np
    from mindspore import Parameter, Tensor
    return Parameter(Tensor(np.zeros((1,), np.float32)), name=name, requires_grad=False)


def prepare_int8(net, group=0):
    """Mark what --quantize int8 (`group`: int8-g<group>) makes int8 in `net`, before its weights are loaded: the
    layers of a decoder whose layers are all dense SiLU-gated ones (a MoE decoder's dense layers run in its
    host-routed layer graphs, which read no int8: they stay as they are), the head (a tied head's embedding
    table) and a MoE layer's expert stacks where the native MoeExperts is routed (each stack gets its
    `<name>_scale`, the MoE cell `quantized = True`). Each such Linear gets a `weight_scale` Parameter, each such
    layer `quantized = True`, `q8_group` and a `q8_scales` Parameter (filled by finish_int8). Returns an Int8Plan:
    {weight Parameter name: its scale Parameter}, which the loader quantises as it reads them (convert/loader.py),
    so the bf16 / fp32 matrices are never allocated, and the names of the Parameters made here (no checkpoint has
    them). A matrix whose columns are not a multiple of `group` is an error."""
    from ms_ocr.ops import backend
    scales, made = {}, set()

    def mark(owner, attr="weight"):
        weight = getattr(owner, attr)
        columns = weight.shape[-1]
        if group and columns % group:
            raise ValueError(f"--quantize int8-g{group}: {weight.name} has {columns} columns, not a multiple "
                             f"of {group} (use --quantize int8)")
        scale = _placeholder(f"{weight.name}_scale")
        setattr(owner, f"{attr}_scale", scale)
        scales[weight.name] = scale
        made.add(scale.name)

    layers = net.text_layers()
    for layer in layers if all(quantizable(layer) for layer in layers) else []:
        for linear in layer.matrices():
            mark(linear)
        prefix = layer.self_attn.q_proj.weight.name.rsplit("self_attn.", 1)[0]
        layer.q8_scales = _placeholder(f"{prefix}q8_scales")
        made.add(layer.q8_scales.name)
        layer.quantized = True
        layer.q8_group = group
    # a MoE decoder's routed experts, read in place by the native MoeExperts (decode) and dequantised one expert at
    # a time for a prompt (runtime/moe.py); where that kernel is not routed they stay as they are
    for layer in layers if backend.NATIVE_MOE_EXPERTS is not None else []:
        if layer.moe:
            for attr in ("gate_proj", "up_proj", "down_proj"):
                mark(layer.mlp.experts, attr)
            layer.mlp.quantized = True
    # the head: its own matrix, or the embedding table it is tied to (the lookup then dequantises: VLMCell.embed)
    mark(net.model.embed_tokens if net.tied else net.lm_head)
    net.head_quantized = True
    return Int8Plan(scales, made, group)


def finish_int8(net):
    """Fill each quantised layer's q8_scales (its seven matrices' scales in DecoderLayer.matrices() order, the order
    DecodeLayer reads them) once the weights are loaded."""
    import numpy as np
    import mindspore as ms

    from ms_ocr.convert.loader import adopt, device_tensor
    for layer in net.text_layers():
        if layer.quantized:
            scales = [linear.weight_scale.asnumpy().ravel() for linear in layer.matrices()]
            adopt(layer.q8_scales, device_tensor(np.concatenate(scales), ms.float32))
