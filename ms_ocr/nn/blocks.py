"""Transformer blocks holding HF-named Parameters: pre-norm decoder layer (llama family), pre-LN ViT layer.

The math lives in nn/functional.py; `weights(names)` hands a layer's weights to the shared layer steps
in the order the functions take them.
"""

from mindspore import Tensor, nn

from ms_ocr.nn import functional as F
from ms_ocr.nn.attention import KVCacheAttention, VisionSelfAttention
from ms_ocr.nn.layers import LayerNorm, RMSNorm
from ms_ocr.nn.mlp import MLP, GatedMLP
from ms_ocr.ops import get_activation


def graph_input(param, fused=False):
    """A Parameter's data as a plain Tensor for a graph input (a graph called with different Parameter
    objects compiles a new executable per Parameter set, each with its own activation pool).

    Off Ascend: a zero-copy view of the Parameter's own host buffer (Tensor.from_numpy of asnumpy()). Not
    `Parameter.value()`: the CPU runtime copies a value() input (an Identity kernel) on every call whose inputs
    changed — every call of a layer graph shared by several layers. On Ascend (`fused`) the device tensor, value().

    The view is made once per Parameter buffer and kept on the Parameter (rebuilt if set_data replaced the
    buffer): a graph call that gets a new Tensor object for an input costs more than one that gets the same
    Tensor again (measured on DeepSeek-OCR-2's host-routed MoE decode, 14 graph calls per token:
    docs/journal/architecture.md, "Compile once")."""
    if fused:
        return param.value()
    ptr = param.data_ptr() if hasattr(param, "data_ptr") else None
    memo = getattr(param, "_ms_ocr_view", None)
    if ptr is not None and memo is not None and memo[0] == ptr:
        return memo[1]
    view = Tensor.from_numpy(param.asnumpy())
    if ptr is not None:
        param._ms_ocr_view = (ptr, view)
    return view


def forget_graph_input(param):
    """Drop the view graph_input keeps on `param`: before its data is replaced by a release (a kept view holds the
    old buffer, and its memory, alive)."""
    param.__dict__.pop("_ms_ocr_view", None)


class WeightOrder:
    """Mixin of a layer Cell: `weights(names)` -> its weight Tensors in the order of `names` (F.*_WEIGHTS), as
    `graph_input`s for the kernels bound to it."""

    def weights(self, names):
        out = []
        for name in names:
            obj = self
            for part in name.split("."):
                obj = getattr(obj, part)
            out.append(graph_input(obj, self.kernels.fused))
        return tuple(out)


# A dense decoder layer's matrices in the order the native DecodeLayer takes them (and --quantize int8 packs their
# scales): q, k, v, o, gate, up, down.
MATRIX_PATHS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                "mlp.up_proj", "mlp.down_proj")


class DecoderLayer(nn.Cell, WeightOrder):
    """input_layernorm -> self_attn -> residual -> post_attention_layernorm -> mlp -> residual.

    qk_norm: per-head RMSNorm on q and k after the rope (HunYuan: self_attn.query_layernorm/key_layernorm).
    paired: whether the layer's rope tables repeat their halves (see ops.apply_rope).
    """

    def __init__(self, hidden, intermediate, num_heads, num_kv_heads, head_dim, eps, act="silu", qk_norm=False,
                 paired=True, mlp=None):
        """mlp: a ready feed-forward Cell (e.g. nn.moe.MoE) instead of the gated MLP of `intermediate`."""
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = KVCacheAttention(hidden, num_heads, num_kv_heads, head_dim, qk_norm, eps, paired)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = GatedMLP(hidden, intermediate, act) if mlp is None else mlp
        self.moe = mlp is not None
        self.spec = dict(heads=num_heads, kv_heads=num_kv_heads, dim=head_dim, eps=eps, act=get_activation(act),
                         qk_norm=qk_norm, paired=paired)
        # the native decode-layer kernel (CPU) serves dense SiLU-gated layers
        self.silu_mlp = mlp is None and get_activation(act) is get_activation("silu")
        attn_in = F.DECODER_ATTN_IN_WEIGHTS + (F.QK_NORM_WEIGHTS if qk_norm else ())
        # MoE layers run their FFN outside the shared prefill layer graph (runtime/moe.py HostMoE.prefill)
        self.weight_names = attn_in + (F.DECODER_OUT_WEIGHTS[:2] if self.moe else F.DECODER_OUT_WEIGHTS)
        # --quantize int8 (models/quantize.py): the matrices int8, each Linear with its weight_scale, q8_scales and
        # q8_group (columns per scale, 0: one per row)
        self.quantized = False
        self.q8_group = 0

    def construct(self, x, cos, sin, write_idx, mask):
        """Cached step over caches the graph writes (in-graph layout): this step's k/v go into them, then it
        attends over them."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, write_idx, mask)
        return x + self.mlp(self.post_attention_layernorm(x))

    def matrices(self):
        """The seven Linears of a dense layer (MATRIX_PATHS), in the order DecodeLayer takes them."""
        out = []
        for path in MATRIX_PATHS:
            owner, attr = path.split(".")
            out.append(getattr(getattr(self, owner), attr))
        return out

    def attention_weights(self):
        """input_layernorm, q/k/v_proj, (query/key_layernorm), o_proj, post_attention_layernorm: the attention's
        weights in the native DecodeLayer's order."""
        attn = self.self_attn
        weights = (self.input_layernorm.weight, attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight)
        if attn.qk_norm:
            weights = weights + (attn.query_layernorm.weight, attn.key_layernorm.weight)
        return weights + (attn.o_proj.weight, self.post_attention_layernorm.weight)

    def decode_weights(self):
        """A dense layer's weights as the native DecodeLayer takes them: attention_weights, then gate, up, down (an
        MoE layer's: its shared experts', as the host step's MoE layers take them beside MoE.routed_weights)."""
        mlp = self.mlp.shared_experts if self.moe else self.mlp
        return self.attention_weights() + (mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight)

    def read_only_step(self, x, cos, sin, mask, k_cache=None, v_cache=None):
        """One new token per sequence over caches the host writes (allocated flat=False), which this step only
        reads: (x, k, v), the token's k/v for the host to store. k_cache, v_cache: the caches as graph inputs
        [B, Hkv, T, D] (views of the first B sequence rows of the layer's cache Parameters); None reads the
        Parameters themselves. A dense layer's kernel is F.decoder_layer_decode's choice; an MoE layer attends
        composed, then runs its MoE Cell."""
        attn, kn = self.self_attn, self.kernels
        if k_cache is None:
            k_cache, v_cache = attn.k_cache, attn.v_cache
        if self.moe:
            x, h, k, v = F.decoder_attention_decode(kn, x, cos, sin, mask, k_cache, v_cache, self.attention_weights(),
                                                    attn.num_heads, attn.num_kv_heads, attn.head_dim, attn.eps,
                                                    attn.paired)
            return x + self.mlp(h), k, v
        mlp = self.mlp
        weights = self.decode_weights()
        int8 = ()
        if self.quantized:
            scales = (attn.q_proj.weight_scale, attn.k_proj.weight_scale, attn.v_proj.weight_scale,
                      attn.o_proj.weight_scale, mlp.gate_proj.weight_scale, mlp.up_proj.weight_scale,
                      mlp.down_proj.weight_scale)
            int8 = (scales, self.q8_scales, self.q8_group)
        return F.decoder_layer_decode(kn, x, cos, sin, mask, k_cache, v_cache, weights, attn.num_heads,
                                      attn.num_kv_heads, attn.head_dim, attn.eps, mlp.act, attn.paired,
                                      self.silu_mlp, int8)


# Checkpoint names of a pre-LN ViT layer's parts, per family: norm1, norm2, attention out proj, fc1, fc2.
SIGLIP_NAMES = dict(norm1="layer_norm1", norm2="layer_norm2", out="out_proj", fc1="fc1", fc2="fc2")
HUNYUAN_VIT_NAMES = dict(norm1="input_layernorm", norm2="post_attention_layernorm", out="o_proj",
                         fc1="dense_h_to_4h", fc2="dense_4h_to_h")


class ViTLayer(nn.Cell, WeightOrder):
    """Pre-LN ViT layer (norm1 -> self_attn -> norm2 -> mlp) holding its Parameters under the checkpoint's
    names (`names`, e.g. SIGLIP_NAMES); it runs through the shared steps (F.vit_attention_in / attention
    chunks / F.vit_out_mlp), which take the weights in F.VIT_ATTN_IN_ROLES / VIT_OUT_ROLES order."""

    def __init__(self, dim, intermediate, num_heads, eps, act, rope=True, names=None):
        super().__init__()
        names = dict(SIGLIP_NAMES if names is None else names)
        setattr(self, names["norm1"], LayerNorm(dim, eps))
        self.self_attn = VisionSelfAttention(dim, num_heads, out_name=names["out"])
        setattr(self, names["norm2"], LayerNorm(dim, eps))
        self.mlp = MLP(dim, intermediate, act, names=(names["fc1"], names["fc2"]))
        self.spec = dict(heads=num_heads, dim=dim // num_heads, eps=eps, act=get_activation(act), rope=rope)
        full = {"norm1": names["norm1"], "norm2": names["norm2"], "q": "self_attn.q_proj", "k": "self_attn.k_proj",
                "v": "self_attn.v_proj", "out": f"self_attn.{names['out']}", "fc1": f"mlp.{names['fc1']}",
                "fc2": f"mlp.{names['fc2']}"}

        def resolve(roles):
            return tuple(f"{full[r.split('.')[0]]}.{r.split('.')[1]}" for r in roles)

        self.attn_in_names = resolve(F.VIT_ATTN_IN_ROLES)
        self.out_names = resolve(F.VIT_OUT_ROLES)
