"""Layer math as functions of explicit weights and the process's kernels (`kn`, ms_ocr/ops/kernels.py).

Parameter-holding Cells (nn/blocks.py) call these with their own Parameters; the shared layer steps
(ms_ocr/steps.py) call them with one layer's weights passed as graph inputs, so a single compiled graph
serves every layer. On the CPU backend each compiled graph keeps a static pool for all its activations
(never reused across layers), so one graph reused for all
layers bounds memory to one layer's activations and compiles once; vision attention additionally runs in
query chunks (its own graph) so the [H, N, N] scores never exist whole.
"""

from mindspore import dtype as mstype
from mindspore import ops

from ms_ocr import ops as K


def widen(kn, weights, x):
    """Weights in x's dtype: bf16 weights kept bf16 on the CPU (Plan.bf16_weights) widened, exactly, for a
    graph that computes in fp32 over them (the cast's output lives in the graph's pool: one layer's worth, freed
    when the graph returns). Weights already in x's dtype (fp32 on the CPU, bf16 on Ascend) pass unchanged, and so
    do bf16 matrices where products are computed in bf16 (--dtype bf16 on the CPU: K.keeps_bf16)."""
    return tuple(w if K.keeps_bf16(kn, w) else K.widen(kn, w, x.dtype) for w in weights)


def linear(kn, x, w, b=None):
    """x W^T (+ b) with W [out, in]; MatMul(transpose_b) never materialises W^T (kernel in ops/linear.py)."""
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    y = K.matmul_t(kn, x, w) if b is None else K.linear_bias(kn, x, w, b)
    return y.reshape(shape[:-1] + (w.shape[0],))


def layer_norm(kn, x, w, b, eps):
    """LayerNorm over the last axis (kernel choice in ms_ocr/ops/norm.py)."""
    return K.layer_norm(kn, x, w, b, eps)


def rows(t, start, end, axis):
    """Rows [start, end) of `t` along `axis` (0 or -2); `t` itself when that is all of them. MindSpore's CPU
    StridedSlice is slow on a slice spanning a whole axis (far slower than on a part of it), and a whole range
    needs no copy anyway."""
    if start == 0 and end == t.shape[axis]:
        return t
    return t[start:end] if axis == 0 else t[..., start:end, :]


def heads_first(x, n, heads, dim):
    # [N, H*D] -> [1, H, N, D]
    return x.reshape(n, heads, dim).transpose(1, 0, 2)[None]


# A pre-LN ViT layer's weights by role, split where attention runs as its own graph calls. Layers hold
# them under their checkpoint's names (ViTLayer.attn_in_names / out_names give them in this order).
VIT_ATTN_IN_ROLES = ("norm1.weight", "norm1.bias", "q.weight", "q.bias", "k.weight", "k.bias", "v.weight", "v.bias")
VIT_OUT_ROLES = ("out.weight", "out.bias", "norm2.weight", "norm2.bias", "fc1.weight", "fc1.bias",
                 "fc2.weight", "fc2.bias")


def vit_attention_in(kn, x, cos, sin, weights, heads, eps):
    """layer_norm1 and the q/k/v projections (+ 2D rope when cos is given): [N, C] -> q, k, v [1, H, N, D]."""
    ln1w, ln1b, qw, qb, kw, kb, vw, vb = weights
    n, c = x.shape
    dim = c // heads
    h = layer_norm(kn, x, ln1w, ln1b, eps)
    if cos is not None:  # the bias adds, head transposes and rope in one op (K.vit_heads)
        yq, yk, yv = K.matmul_t(kn, h, qw), K.matmul_t(kn, h, kw), K.matmul_t(kn, h, vw)
        return K.vit_heads(kn, yq, yk, yv, qb, kb, vb, cos, sin, heads)
    q = heads_first(linear(kn, h, qw, qb), n, heads, dim)
    k = heads_first(linear(kn, h, kw, kb), n, heads, dim)
    v = heads_first(linear(kn, h, vw, vb), n, heads, dim)
    return q, k, v


def vit_out_mlp(kn, x, attn, weights, eps, act, act_role=None):
    """out projection + residual, then layer_norm2 -> fc1 -> act -> fc2 + residual. attn [N, C] rows (or [1, N, C]:
    K.attention_rows). Each product with its bias, activation and residual through K.linear_bias (one op each
    where products are in bf16; act_role: K.epilogue_role(act))."""
    ow, ob, ln2w, ln2b, f1w, f1b, f2w, f2b = weights
    n, c = x.shape
    x = K.linear_bias(kn, attn.reshape(n, c), ow, ob, residual=x)
    mid = K.linear_bias(kn, layer_norm(kn, x, ln2w, ln2b, eps), f1w, f1b, act=act, act_role=act_role)
    return K.linear_bias(kn, mid, f2w, f2b, residual=x)


# A llama-family decoder layer's weights (no biases), split around attention like the ViT layer's; layers
# with q/k norms (HunYuan) append their two norm weights to the attention-in group.
DECODER_ATTN_IN_WEIGHTS = (
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
)
QK_NORM_WEIGHTS = ("self_attn.query_layernorm.weight", "self_attn.key_layernorm.weight")
DECODER_OUT_WEIGHTS = (
    "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
)


def project_qkv(kn, h, cos, sin, qw, kw, vw, heads, kv_heads, dim, qk_norm=None, eps=1e-6, paired=True):
    """[B, S, C] -> rope'd q [B, H, S, D], k [B, Hkv, S, D], and v [B, Hkv, S, D].

    qk_norm = (q_norm_weight, k_norm_weight) applies per-head RMSNorm after the rope (HunYuan's order).
    """
    b, s, _ = h.shape
    q = linear(kn, h, qw).reshape(b, s, heads, dim).transpose(0, 2, 1, 3)
    k = linear(kn, h, kw).reshape(b, s, kv_heads, dim).transpose(0, 2, 1, 3)
    v = linear(kn, h, vw).reshape(b, s, kv_heads, dim).transpose(0, 2, 1, 3)
    q, k = K.apply_rope(kn, q, cos, sin, paired), K.apply_rope(kn, k, cos, sin, paired)
    if qk_norm is not None:
        q, k = K.rms_norm(kn, q, qk_norm[0], eps), K.rms_norm(kn, k, qk_norm[1], eps)
    return q, k, v


def merge_heads(out):
    # [B, H, S, D] -> [B, S, H*D]
    b, h, s, d = out.shape
    return out.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def gated_mlp(kn, x, gw, uw, dw, act):
    return linear(kn, act(kn, linear(kn, x, gw)) * linear(kn, x, uw), dw)


def decoder_attention_in(kn, x, cos, sin, weights, heads, kv_heads, dim, eps, paired=True):
    """input_layernorm and rope'd q/k/v of a whole prompt: q [B, H, S, D], k/v [B, Hkv, S, D].
    weights: DECODER_ATTN_IN_WEIGHTS order, optionally followed by the QK_NORM_WEIGHTS pair."""
    inw, qw, kw, vw = weights[:4]
    qk_norm = weights[4:6] if len(weights) == 6 else None
    return project_qkv(kn, K.rms_norm(kn, x, inw, eps), cos, sin, qw, kw, vw, heads, kv_heads, dim, qk_norm, eps,
                       paired)


def decoder_out_mlp(kn, x, attn, weights, eps, act):
    """o_proj + residual, then post_attention_layernorm -> gated MLP + residual. attn [B, H, S, D]."""
    ow, postw, gw, uw, dw = weights
    x = x + linear(kn, merge_heads(attn), ow)
    return x + gated_mlp(kn, K.rms_norm(kn, x, postw, eps), gw, uw, dw, act)


def causal_block_attention(kn, q, k, v, block, scale):
    """Causal attention of a prompt over itself in query blocks: block i attends keys [0, end_i) only, so
    the masked upper triangle is (mostly) never computed. q [B, H, S, D]; k, v [B, Hkv, S, D]. On the CPU
    with the native kernels, one kernel does it without writing any scores (ops.causal_attention)."""
    if K.native_causal_ok(kn, q, k, v):
        return K.causal_attention(kn, q, k, v, scale)
    s = q.shape[2]
    outs = []
    for start in range(0, s, block):
        end = min(start + block, s)
        query_pos = ops.arange(start, end, dtype=mstype.int32)
        key_pos = ops.arange(0, end, dtype=mstype.int32)
        visible = (key_pos[None, :] <= query_pos[:, None])[None, None]
        outs.append(K.attention(kn, rows(q, start, end, -2), rows(k, 0, end, -2), rows(v, 0, end, -2),
                                K.attention_mask(kn, visible), scale))
    return outs[0] if len(outs) == 1 else ops.concat(outs, 2)


def decoder_layer_prefill(kn, x, cos, sin, weights, heads, kv_heads, dim, eps, act, block, paired=True):
    """A whole prompt through one decoder layer; weights = attention-in group (4, or 6 with q/k norms) +
    DECODER_OUT_WEIGHTS. Returns the output and the layer's rope'd k, v [B, Hkv, S, D] for the KV cache."""
    weights = widen(kn, weights, x)
    n_in = len(weights) - len(DECODER_OUT_WEIGHTS)
    q, k, v = decoder_attention_in(kn, x, cos, sin, weights[:n_in], heads, kv_heads, dim, eps, paired)
    attn = causal_block_attention(kn, q, k, v, block, dim ** -0.5)
    return decoder_out_mlp(kn, x, attn, weights[n_in:], eps, act), k, v


def decoder_attention_decode(kn, x, cos, sin, mask, k_cache, v_cache, weights, heads, kv_heads, dim, eps,
                             paired=True):
    """The attention half of a decoder layer for one new token per sequence over a cache it only reads
    (k_cache, v_cache [B, Hkv, T, D]; see ops.attention_with_new): weights = attention-in group + (o_proj,
    post_attention_layernorm). Returns x + attention, its post_attention_layernorm, and the token's k, v
    [B, Hkv, 1, D] for the host to store. bf16-resident weights: the vectors (the norms) widened here, the
    matrices by `linear` (ops.linear.matmul_t: the native kernel reads large ones as bf16, small ones are widened)."""
    n_in = len(weights) - 2
    weights = tuple(K.widen(kn, w, x.dtype) if len(w.shape) == 1 else w for w in weights)
    q, k, v = decoder_attention_in(kn, x, cos, sin, weights[:n_in], heads, kv_heads, dim, eps, paired)
    x = x + linear(kn, merge_heads(K.attention_with_new(kn, q, k_cache, v_cache, k, v, mask, dim ** -0.5)),
                   weights[n_in])
    return x, K.rms_norm(kn, x, weights[n_in + 1], eps), k, v


def decoder_attention_prefill(kn, x, cos, sin, weights, heads, kv_heads, dim, eps, block, paired=True):
    """The attention half of a decoder layer over a whole prompt, for layers whose FFN runs apart (MoE):
    weights = attention-in group + (o_proj, post_attention_layernorm). Returns x + attention, its
    post_attention_layernorm, and the layer's k, v for the cache."""
    weights = widen(kn, weights, x)
    n_in = len(weights) - 2
    q, k, v = decoder_attention_in(kn, x, cos, sin, weights[:n_in], heads, kv_heads, dim, eps, paired)
    x = x + linear(kn, merge_heads(causal_block_attention(kn, q, k, v, block, dim ** -0.5)), weights[n_in])
    return x, K.rms_norm(kn, x, weights[n_in + 1], eps), k, v


def decoder_layer_decode(kn, x, cos, sin, mask, k_cache, v_cache, weights, heads, kv_heads, dim, eps, act, paired,
                         silu_mlp, int8=()):
    """A dense decoder layer for one new token per sequence over caches it only reads (k_cache, v_cache
    [B, Hkv, T, D]): x after the layer and the token's k, v [B, Hkv, 1, D] for the host to store. weights: the
    attention-in group, o_proj, post_attention_layernorm, gate, up, down (the native DecodeLayer's order); `int8`:
    for int8 matrices (--quantize int8), (the seven matrices' scales, the same packed in DecodeLayer's order,
    columns per scale or 0).

    The kernel, from `kn`: the native DecodeLayer (its AMX variant under --dtype bf16) where it serves the layer
    (SiLU-gated, up to 8 sequences: ops/decode_layer.py), else the composed attention (ops.attention_with_new) and
    gated MLP, int8 matrices dequantised and bf16 ones widened first."""
    if K.decode_layer_serves(kn, x, k_cache, weights, silu_mlp):
        return K.decode_layer_step(kn, x, cos, sin, mask, k_cache, v_cache, weights, eps, *int8[1:])
    n_in = len(weights) - 5
    if int8:  # int8 matrices off the kernel (more than 8 sequences): dequantised
        matrices = (1, 2, 3, n_in, n_in + 2, n_in + 3, n_in + 4)
        wide = [K.dequant_q8(kn, weights[i], s) for i, s in zip(matrices, int8[0])]
        weights = weights[:1] + tuple(wide[:3]) + weights[4:n_in] + (wide[3], weights[n_in + 1]) + tuple(wide[4:])
    x, h, k, v = decoder_attention_decode(kn, x, cos, sin, mask, k_cache, v_cache, weights[:n_in + 2], heads, kv_heads,
                                          dim, eps, paired)
    # bf16-resident matrices off the kernel: the MLP over widened copies
    gw, uw, dw = widen(kn, weights[n_in + 2:], h)
    return x + gated_mlp(kn, h, gw, uw, dw, act), k, v
