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
1/16 or 1/8 more bytes per weight (fp32 scales). The quantiser itself: ms_ocr/convert/quantize.py."""

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor

from ms_ocr.convert.loader import adopt, device_tensor
from ms_ocr.convert.quantize import Int8Plan


def quantizable(layer):
    return not layer.moe and layer.silu_mlp


def _placeholder(name):
    return Parameter(Tensor(np.zeros((1,), np.float32)), name=name, requires_grad=False)


def prepare_int8(net, plan):
    """Mark what --quantize int8 (plan.int8_group: columns per scale) makes int8 in `net`, before its weights are
    loaded: the layers of a decoder whose layers are all dense SiLU-gated ones (a MoE decoder's dense layers run in its
    host-routed layer graphs, which read no int8: they stay as they are), the head (a tied head's embedding
    table) and a MoE layer's expert stacks where the native MoeExperts is routed (each stack gets its
    `<name>_scale`, the MoE cell `quantized = True`). Each such Linear gets a `weight_scale` Parameter, each such
    layer `quantized = True`, `q8_group` and a `q8_scales` Parameter (filled by finish_int8). Returns an Int8Plan:
    {weight Parameter name: its scale Parameter}, which the loader quantises as it reads them (convert/loader.py),
    so the bf16 / fp32 matrices are never allocated, and the names of the Parameters made here (no checkpoint has
    them). A matrix whose columns are not a multiple of the group is an error."""
    group = plan.int8_group
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
    for layer in layers if plan.kernels.moe_experts is not None else []:
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
    for layer in net.text_layers():
        if layer.quantized:
            scales = [linear.weight_scale.asnumpy().ravel() for linear in layer.matrices()]
            adopt(layer.q8_scales, device_tensor(np.concatenate(scales), ms.float32))
