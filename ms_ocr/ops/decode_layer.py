"""A dense decoder layer's decode step (one new token per sequence over KV caches it only reads) as one native
CPU kernel: `DecodeLayer` in ms_ocr/ops/native/decode_layer.cc.

What it computes is F.decoder_attention_decode followed by F.gated_mlp with SiLU: input RMSNorm, q/k/v
products, rope (the general rotate-half form), optional per-head q/k RMSNorm, GQA softmax attention over the
cache slots the additive mask leaves visible plus the token's own key, o_proj and residual, post-attention
RMSNorm, the gated MLP and residual. Composed from MindSpore kernels that is ~45 kernels per layer, and on
the CPU the launches between them cost more than their arithmetic (MindSpore's profiler); the kernel does the
layer in one OpenMP region whose matrix-vector products read each weight once at the bandwidth the native head
reaches. Decode only: prefill products are compute bound
and stay on MindSpore's MatMul.
"""

import numpy as np
import mindspore as ms
from mindspore import Tensor

MAX_ROWS = 8      # sequences per step the kernel takes (its matrix-vector products hold 8 rows of x)
MAX_HEAD_DIM = 512


def serves(kn, x, k_cache, weights, silu_mlp):
    """Whether `step` serves this layer (decided at graph-compile time): the native library is
    in use, the MLP is SiLU-gated (silu_mlp), activations are fp32, caches fp32 or bf16 (--kv-cache-dtype bf16:
    widened as read), weights fp32 or bf16 (read as bf16 and widened in registers: bit-identical to their fp32
    copies) or int8, and the shapes are within the kernel's limits."""
    ok = kn.decode_layer is not None and silu_mlp
    ok = ok and x.shape[0] <= MAX_ROWS and k_cache.shape[-1] <= MAX_HEAD_DIM
    ok = ok and x.dtype == ms.float32 and k_cache.dtype in (ms.float32, ms.bfloat16)
    for w in weights:
        ok = ok and w.dtype in (ms.float32, ms.bfloat16, ms.int8)
    return ok


def step(kn, x, cos, sin, mask, k_cache, v_cache, weights, eps, q8_scales=None, q8_group=0):
    """x [B, 1, H]; cos, sin [B|1, 1, 1, D]; mask [B|1, 1, 1, T] (fp32 additive, ops.attention_mask);
    k_cache, v_cache [B, Hkv, T, D]; weights = (input_layernorm, q_proj, k_proj, v_proj[, query_layernorm,
    key_layernorm], o_proj, post_attention_layernorm, gate_proj, up_proj, down_proj). Returns x after the
    layer and this token's k, v [B, Hkv, 1, D] (after the rope and q/k norm; with bf16 caches rounded to bf16,
    as the cache holds them, before the attention uses them) for the host to store. With int8
    matrices (--quantize int8), q8_scales holds their scales packed in the order q, k, v, o, gate, up, down, each
    matrix's [N] (one per row) or, with q8_group G, [N, K / G] (one per group of G columns) flattened."""
    # --dtype bf16 on a CPU with AMX: DecodeLayerBf16 (its bf16 weights' products on the tiles, rows rounded to bf16)
    ops_ = kn.amx_decode[1] if kn.amx_decode is not None else kn.decode_layer
    op = ops_[1 if len(weights) == 11 else 0]  # with q/k norms: 11 weights
    scales = () if q8_scales is None else (q8_scales,)
    eps = [eps, q8_group] if q8_scales is not None and q8_group else [eps]
    return op(x, cos, sin, mask, k_cache, v_cache, *weights, *scales, Tensor(np.array(eps, np.float32)))
