"""Kernel choice: one function per kernel, each taking the process's Kernels (ops/kernels.py) first: a fused Ascend
operator, a native CPU kernel (ops/native) or the composed MindSpore formulation."""

from ms_ocr.ops.activation import gelu_erf, gelu_tanh, get_activation, quick_gelu, silu
from ms_ocr.ops.attention import (attention, attention_mask, attention_rows, attention_with_new, causal_attention,
                                  native_causal_ok)
from ms_ocr.ops.conv import ConvAffine, conv2d, conv2d_affine, conv_affine_native, deformable_native
from ms_ocr.ops.decode_layer import serves as decode_layer_serves, step as decode_layer_step
from ms_ocr.ops.kernels import COMPOSED, Kernels, bind, choose, rebound
from ms_ocr.ops.linear import (dequant_q8, embedding_rows, embedding_rows_q8, epilogue_role, expert_rows,
                               interp_rows, keeps_bf16, linear_bias, linear_conv, matmul_t, matmul_t_q8, widen)
from ms_ocr.ops.moe import (expert_ends, experts_decode, experts_native, grouped_matmul, token_permute,
                            token_unpermute)
from ms_ocr.ops.norm import layer_norm, rms_norm
from ms_ocr.ops.rope import apply_rope, vit_heads

__all__ = ["attention", "attention_mask", "attention_rows", "attention_with_new", "causal_attention",
           "native_causal_ok", "apply_rope", "vit_heads", "ConvAffine", "conv2d", "conv2d_affine",
           "conv_affine_native", "deformable_native", "decode_layer_serves", "decode_layer_step", "COMPOSED", "Kernels",
           "bind", "choose", "rebound", "dequant_q8", "embedding_rows", "embedding_rows_q8", "epilogue_role",
           "expert_rows", "interp_rows", "keeps_bf16", "linear_bias", "linear_conv", "matmul_t", "matmul_t_q8", "widen",
           "rms_norm", "layer_norm", "token_permute", "expert_ends", "experts_decode", "experts_native",
           "grouped_matmul", "token_unpermute", "gelu_tanh", "gelu_erf", "quick_gelu", "silu", "get_activation"]
