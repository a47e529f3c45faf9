"""--quantize int8: weight-only int8 for the decoder, made at load time from the checkpoint's own values (no new
files). Each matrix of a dense SiLU-gated decoder layer (q, k, v, o, gate, up, down: the layers the native decode
kernel serves) and an untied head become int8 with one fp32 scale per output row (symmetric: scale = max|row| / 127,
q = round(w / scale)); a row of a product is scale * (x . q). A decode step reads the int8 matrices as they are
(DecodeLayer, MatMulTQ8: half the bytes of bf16); prefill dequantises a layer's matrices to fp32 as it runs them
(DequantQ8), so prompts compute on the dequantised values. Vision, the embeddings, norms and MoE layers stay as
they are. CPU only: on Ascend the corresponding path is MindSpore Golden Stick's weight-only quantisation with the
NPU's quantised matmul, not run yet. The command lines read MODES without importing the framework."""

MODES = ("none", "int8")
# the matrices of a dense decoder layer, in the order DecodeLayer reads their packed scales
MATRICES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
            "mlp.up_proj", "mlp.down_proj")


def quantize_rows(w):
    """w [N, K] (float) -> (q int8 [N, K], scale fp32 [N]): per-row symmetric int8, rounding to nearest even."""
    import numpy as np
    w = np.asarray(w, np.float32)
    scale = np.abs(w).max(1) / 127
    scale[scale == 0] = 1
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


CHUNK_ROWS = 8192  # rows widened to fp32 at a time (a 103,424-row head would be a 424 MB fp32 copy at once)


def quantize_param(param):
    """A Parameter [N, K] (fp32, or bf16 read as its raw words without a whole fp32 copy) -> quantize_rows, row
    chunk by row chunk."""
    import numpy as np
    raw = param.asnumpy()  # a CPU Parameter's own buffer (no copy); bf16 as NumPy's bfloat16 (numpy<2)
    if raw.dtype.name == "bfloat16":
        raw = raw.view(np.uint16)
    qs, scales = [], []
    for start in range(0, param.shape[0], CHUNK_ROWS):
        rows = raw[start:start + CHUNK_ROWS]
        if rows.dtype == np.uint16:  # bf16 words widened exactly
            rows = (rows.astype(np.uint32) << 16).view(np.float32)
        q, s = quantize_rows(rows)
        qs.append(q)
        scales.append(s)
    return np.concatenate(qs), np.concatenate(scales)


def pool_parameter(arr, name):
    """A Parameter holding `arr` in MindSpore's memory pool, as the loader stores weights (convert/loader.py
    device_tensor: a Parameter over host memory is copied into every graph that reads it)."""
    import numpy as np
    import mindspore as ms
    from mindspore import Parameter, Tensor

    from ms_ocr.convert.loader import adopt, device_tensor
    dtype = {np.dtype(np.int8): ms.int8, np.dtype(np.float32): ms.float32}[arr.dtype]
    param = Parameter(Tensor(np.zeros((1,) * arr.ndim, arr.dtype)), name=name, requires_grad=False)
    adopt(param, device_tensor(arr, dtype))
    return param


def _quantize_linear(linear):
    """Replace linear.weight by its int8 form and add linear.weight_scale; returns the scales."""
    name = linear.weight.name
    q, scale = quantize_param(linear.weight)
    linear.weight = None  # the bf16 / fp32 matrix goes back to the pool before its int8 form is allocated
    linear.weight = pool_parameter(q, name)
    linear.weight_scale = pool_parameter(scale, f"{name}_scale")
    return scale


def quantizable(layer):
    return not layer.moe and layer.silu_mlp


def quantize_int8(net):
    """Quantise `net`'s decoder layers when all are dense SiLU-gated ones (a MoE decoder's dense layers run in its
    host-routed layer graphs, which read no int8: they stay as they are) and its head when untied, in place;
    returns how many matrices. Each quantised layer gets `quantized = True` and `q8_scales` (its seven matrices'
    scales in MATRICES order)."""
    import numpy as np
    count = 0
    layers = net.text_layers()
    for layer in layers if all(quantizable(layer) for layer in layers) else []:
        if layer.quantized:
            continue
        scales = []
        for path in MATRICES:
            owner, attr = path.split(".")
            scales.append(_quantize_linear(getattr(getattr(layer, owner), attr)))
        prefix = layer.self_attn.q_proj.weight.name.rsplit("self_attn.", 1)[0]
        layer.q8_scales = pool_parameter(np.concatenate(scales), f"{prefix}q8_scales")
        layer.quantized = True
        count += len(MATRICES)
    if not net.tied and not net.head_quantized:
        _quantize_linear(net.lm_head)
        net.head_quantized = True
        count += 1
    return count
