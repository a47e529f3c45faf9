"""Layer math as functions of explicit weights.

Parameter-holding Cells (nn/blocks.py) call these with their own Parameters; the shared layer steps
(ms_ocr/steps.py) call them with one layer's weights passed as graph inputs, so a single compiled graph
serves every layer. On the CPU backend each compiled graph keeps a static pool for all its activations
(measured: ~5 GB per SigLIP layer at 4k patches, never reused across layers), so one graph reused for all
layers bounds memory to one layer's activations and compiles once; vision attention additionally runs in
query chunks (its own graph) so the [H, N, N] scores never exist whole.
"""

from mindspore import dtype as mstype
from mindspore import ops

from ms_ocr import ops as K

_mm = ops.MatMul(transpose_b=True)


def linear(x, w, b=None):
    """x W^T (+ b) with W [out, in]; MatMul(transpose_b) never materialises W^T."""
    shape = x.shape
    y = _mm(x.reshape(-1, shape[-1]), w)
    if b is not None:
        y = y + b
    return y.reshape(shape[:-1] + (w.shape[0],))


def layer_norm(x, w, b, eps):
    """LayerNorm over the last axis, two-pass statistics in x's dtype (fp32 here)."""
    mean = ops.mean(x, -1, keep_dims=True)
    xc = x - mean
    var = ops.mean(xc * xc, -1, keep_dims=True)
    return xc * ops.rsqrt(var + eps) * w + b


def heads_first(x, n, heads, dim):
    # [N, H*D] -> [1, H, N, D]
    return x.reshape(n, heads, dim).transpose(1, 0, 2)[None]


# A pre-LN ViT layer's weights (SigLIP names), split where attention runs as its own graph calls.
VIT_ATTN_IN_WEIGHTS = (
    "layer_norm1.weight", "layer_norm1.bias", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
    "self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight", "self_attn.v_proj.bias",
)
VIT_OUT_WEIGHTS = (
    "self_attn.out_proj.weight", "self_attn.out_proj.bias", "layer_norm2.weight", "layer_norm2.bias",
    "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias",
)


def vit_attention_in(x, cos, sin, weights, heads, eps):
    """layer_norm1 and the q/k/v projections with 2D rope: [N, C] -> q, k, v [1, H, N, D]."""
    ln1w, ln1b, qw, qb, kw, kb, vw, vb = weights
    n, c = x.shape
    dim = c // heads
    h = layer_norm(x, ln1w, ln1b, eps)
    q = heads_first(linear(h, qw, qb), n, heads, dim)
    k = heads_first(linear(h, kw, kb), n, heads, dim)
    v = heads_first(linear(h, vw, vb), n, heads, dim)
    if cos is not None:
        q = K.apply_rope(q, cos, sin)
        k = K.apply_rope(k, cos, sin)
    return q, k, v


def vit_out_mlp(x, attn, weights, eps, act):
    """out_proj + residual, then layer_norm2 -> fc1 -> act -> fc2 + residual. attn [1, H, N, D]."""
    ow, ob, ln2w, ln2b, f1w, f1b, f2w, f2b = weights
    n, c = x.shape
    x = x + linear(attn[0].transpose(1, 0, 2).reshape(n, c), ow, ob)
    return x + linear(act(linear(layer_norm(x, ln2w, ln2b, eps), f1w, f1b)), f2w, f2b)


# A llama-family decoder layer's weights (no biases), split around attention like the ViT layer's.
DECODER_ATTN_IN_WEIGHTS = (
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
)
DECODER_OUT_WEIGHTS = (
    "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
)


def project_qkv(h, cos, sin, qw, kw, vw, heads, kv_heads, dim):
    """[B, S, C] -> rope'd q [B, H, S, D], k [B, Hkv, S, D], and v [B, Hkv, S, D]."""
    b, s, _ = h.shape
    q = linear(h, qw).reshape(b, s, heads, dim).transpose(0, 2, 1, 3)
    k = linear(h, kw).reshape(b, s, kv_heads, dim).transpose(0, 2, 1, 3)
    v = linear(h, vw).reshape(b, s, kv_heads, dim).transpose(0, 2, 1, 3)
    return K.apply_rope(q, cos, sin), K.apply_rope(k, cos, sin), v


def merge_heads(out):
    # [B, H, S, D] -> [B, S, H*D]
    b, h, s, d = out.shape
    return out.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def gated_mlp(x, gw, uw, dw, act):
    return linear(act(linear(x, gw)) * linear(x, uw), dw)


def decoder_attention_in(x, cos, sin, weights, heads, kv_heads, dim, eps):
    """input_layernorm and rope'd q/k/v of a whole prompt: q [B, H, S, D], k/v [B, Hkv, S, D]."""
    inw, qw, kw, vw = weights
    return project_qkv(K.rms_norm(x, inw, eps), cos, sin, qw, kw, vw, heads, kv_heads, dim)


def decoder_out_mlp(x, attn, weights, eps, act):
    """o_proj + residual, then post_attention_layernorm -> gated MLP + residual. attn [B, H, S, D]."""
    ow, postw, gw, uw, dw = weights
    x = x + linear(merge_heads(attn), ow)
    return x + gated_mlp(K.rms_norm(x, postw, eps), gw, uw, dw, act)


def causal_block_attention(q, k, v, block, scale):
    """Causal attention of a prompt over itself in query blocks: block i attends keys [0, end_i) only, so
    the masked upper triangle is (mostly) never computed. q [B, H, S, D]; k, v [B, Hkv, S, D]."""
    s = q.shape[2]
    outs = []
    for start in range(0, s, block):
        end = min(start + block, s)
        rows = ops.arange(start, end, dtype=mstype.int32)
        cols = ops.arange(0, end, dtype=mstype.int32)
        visible = (cols[None, :] <= rows[:, None])[None, None]
        outs.append(K.attention(q[:, :, start:end], k[:, :, :end], v[:, :, :end], K.attention_mask(visible), scale))
    return outs[0] if len(outs) == 1 else ops.concat(outs, 2)


def decoder_layer_prefill(x, cos, sin, weights, heads, kv_heads, dim, eps, act, block):
    """A whole prompt through one decoder layer; weights in DECODER_ATTN_IN_WEIGHTS + DECODER_OUT_WEIGHTS
    order. Returns the output and the layer's rope'd k, v [B, Hkv, S, D] for the KV cache."""
    n_in = len(DECODER_ATTN_IN_WEIGHTS)
    q, k, v = decoder_attention_in(x, cos, sin, weights[:n_in], heads, kv_heads, dim, eps)
    attn = causal_block_attention(q, k, v, block, dim ** -0.5)
    return decoder_out_mlp(x, attn, weights[n_in:], eps, act), k, v
