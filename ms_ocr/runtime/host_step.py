"""The decode step on the CPU as one call of the native library, without a MindSpore graph around its kernels.

runtime/decode.py's DecodeStep, compiled, runs a dense decoder's step as ~20 native kernels (one DecodeLayer per
layer, MatMulT for the head) and the graph's small ops between them (embedding, rope tables, mask, the k/v stacks).
MindSpore launches each of them: on a 2-core Xeon the launches cost 2.8-6.7 ms of a 44 ms PaddleOCR-VL step, where
the same kernels called directly took the read bound's 1.07-1.32x (docs/journal/native-kernels.md). `HostStep`
prepares the step's inputs on the host: the embedding rows gathered from the table's own buffer (bf16 widened, int8
dequantised, as the graph does), the rope tables of a block of positions computed once by the decoder's own rotary
Cell (a small graph per 256 positions), the additive mask; then one ctypes call, ms_ocr_decode_step
(ops/native/decode_layer.cc), runs every layer's DecodeLayer (DecodeLayerBf16 under --dtype bf16 with AMX; int8
with its scales: the kernel the graph would choose, ops.decode_layer.serves), stores each layer's k, v into the
host-written caches as it returns, applies the final RMSNorm and the head (MatMulT; MatMulTBf16 on the AMX tiles for
a large bf16 head under --dtype bf16; MatMulTQ8 for --quantize int8). Every argument array is built once per cache
size and row count.

It serves what the graph's kernels would serve whole: every layer SiLU-gated with its attention served by DecodeLayer,
caches the host writes, no sliding window, at most 8 sequence rows. A DeepSeek MoE layer (where the graph runs the
native MoeExperts) runs in the same call: the layer's region routes each row itself (fp32 softmax over the router's
logits, top-k, as nn/moe.py route), runs the shared experts and the selected experts' rows of the stacks (moe.h, the
arithmetic MoeExperts does) and adds x1 + (routed + shared) as the graph does; the graph composes that layer's
attention and routes through MindSpore's kernels (~60 launches a layer), so there the host step saves the most. Not
served (the compiled DecodeStep): Unlimited-OCR's window, an MoE decoder under --dtype bf16 on the AMX tiles (the
graph's attention products are tiled there, DecodeLayer's MoE form is not), the exported graph's dense experts, the
composed fallback, Ascend. The layers' arithmetic is the graph's; the final
RMSNorm is the layers' (its sum in another order than MindSpore's ReduceMean), and a head below MatMulT's size in the
graph (tiny test models) is MatMulT's here: logits within ~1e-7 of the graph's. MS_OCR_HOST_STEP=0 keeps the compiled
step everywhere (a comparison, or a fallback)."""

import ctypes
import os
import types

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn

from ms_ocr import ops as K
from ms_ocr.nn.blocks import DecoderLayer
from ms_ocr.ops.attention import NEG_BIAS
from ms_ocr.ops.decode_layer import MAX_ROWS
from ms_ocr.ops.linear import NATIVE_MIN_WEIGHT, NATIVE_MIN_WEIGHT_BF16

ENV = "MS_OCR_HOST_STEP"
ROPE_BLOCK = 256  # positions per rope-table graph call
ROPE_BLOCKS_KEPT = 64  # rope-table blocks kept (256 KB each at head_dim 128), the oldest dropped: a long-lived
# server's answers reach every position of a 128k context over time, and the tables must not grow with them

_DTYPE_NAMES = {ms.float32: b"float32", ms.bfloat16: b"bfloat16", ms.int8: b"int8", ms.float16: b"float16"}
# a kernel's (nparam, params, ndims, shapes, dtypes)
_KERNEL_ARGS = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int),
                ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)), ctypes.POINTER(ctypes.c_char_p)]


class Operand:
    """One operand of a native call: its address, shape and dtype name (as MindSpore's Custom op passes them)."""

    __slots__ = ("ptr", "shape", "dtype")

    def __init__(self, ptr, shape, dtype):
        self.ptr, self.shape, self.dtype = int(ptr), tuple(int(s) for s in shape), dtype

    @classmethod
    def of(cls, t):
        """A Parameter / Tensor (its own buffer) or a C-contiguous numpy array."""
        if isinstance(t, np.ndarray):
            assert t.flags.c_contiguous
            name = b"bfloat16" if t.dtype.name == "bfloat16" else t.dtype.name.encode()
            return cls(t.ctypes.data, t.shape, name)
        return cls(t.data_ptr(), t.shape, _DTYPE_NAMES[t.dtype])


class ArgArrays:
    """The argument arrays of one native kernel call as MindSpore's Custom op passes them (params, ndims, shapes,
    dtypes; kernels.h), built once: ms_ocr_decode_step takes a layer's and the head's."""

    def __init__(self, operands):
        self.n = len(operands)
        self._shapes = [(ctypes.c_int64 * max(1, len(o.shape)))(*o.shape) for o in operands]
        self.params = (ctypes.c_void_p * self.n)(*[o.ptr for o in operands])
        self.ndims = (ctypes.c_int * self.n)(*[len(o.shape) for o in operands])
        self.shapes = (ctypes.POINTER(ctypes.c_int64) * self.n)(
            *[ctypes.cast(s, ctypes.POINTER(ctypes.c_int64)) for s in self._shapes])
        self.dtypes = (ctypes.c_char_p * self.n)(*[o.dtype for o in operands])


HEAD_KINDS = {"MatMulT": 0, "MatMulTBf16": 1, "MatMulTQ8": 2}  # ms_ocr_decode_step's head_kind


class StepCall:
    """The library's ms_ocr_decode_step over the layers' and the head's ArgArrays (and each MoE layer's routed
    operands, None for a dense layer), with the rows' cache slots (`write`, int64 [B], filled per step) and the final
    norm's weight."""

    def __init__(self, library, layers, moe, tiles, write, norm_w, eps, head_kind, head):
        self.fn = library.lib.ms_ocr_decode_step
        p = ctypes.POINTER
        per_layer = [p(ctypes.c_int), p(p(ctypes.c_void_p)), p(p(ctypes.c_int)), p(p(p(ctypes.c_int64))),
                     p(p(ctypes.c_char_p))]
        self.fn.argtypes = [ctypes.c_int] + per_layer * 2 + [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                                             ctypes.c_float, ctypes.c_int] + _KERNEL_ARGS
        self.fn.restype = ctypes.c_int
        n = len(layers)

        def arrays(calls):  # nparam, params, ndims, shapes, dtypes per layer (0 and null pointers for None)
            def each(kind, attr):
                return (kind * n)(*[ctypes.cast(getattr(c, attr), kind) if c is not None else kind()
                                    for c in calls])
            return ((ctypes.c_int * n)(*[c.n if c is not None else 0 for c in calls]),
                    each(p(ctypes.c_void_p), "params"), each(p(ctypes.c_int), "ndims"),
                    each(p(p(ctypes.c_int64)), "shapes"), each(p(ctypes.c_char_p), "dtypes"))
        self.args = (n, *arrays(layers), *arrays(moe), int(tiles), write.ctypes.data, norm_w.ctypes.data, eps,
                     head_kind, head.n, head.params, head.ndims, head.shapes, head.dtypes)
        self._keep = (layers, moe, head, write, norm_w)

    def __call__(self):
        if self.fn(*self.args) != 0:
            raise RuntimeError("the native decode step refused its operands")


class RopeRows(nn.Cell):
    """The decoder's rope tables for positions pos [A, N, 1] -> cos, sin [N, 1, 1, D] (its own rotary Cell)."""

    def __init__(self, model):
        super().__init__(auto_prefix=False)
        self.model = model

    def construct(self, pos):
        return self.model.text_rotary(pos)


def enabled():
    return os.environ.get(ENV, "1") != "0"


def refusal(model, plan, cache):
    """Why HostStep cannot run this model's decode step (None: it can), from what the graph would run."""
    why = model_refusal(model, model.kernels, plan.compute_dtype)
    if why is None and cache.in_graph:
        return "the graphs write the caches"
    return why


def model_refusal(model, kn, compute_dtype):
    """Why HostStep could not run `model`'s decode step with kernels `kn` at `compute_dtype`, whatever its caches
    (None: it could, for up to MAX_ROWS sequences over caches the host writes). plan.make_plan asks it before the
    model is loaded: a MoE decoder's layers attend through DecodeLayer only here (its cache dtype)."""
    if not enabled():
        return f"{ENV}=0"
    if kn is None or kn.fused or kn.library is None:
        return "no native kernel library"
    if kn.decode_layer is None or kn.matmul_t is None:
        return "the native decode kernels are not routed at this SIMD level"
    if model.attention_window is not None:
        return "a sliding-window decoder"
    if compute_dtype != ms.float32:
        return "activations are not fp32"
    for layer in model.text_layers():
        if type(layer) is not DecoderLayer:
            return "a decoder layer the native DecodeLayer does not serve"
        why = _moe_refusal(kn, layer.mlp) if layer.moe else None if layer.silu_mlp else "a layer not SiLU-gated"
        if why is not None:
            return why
    return None


def _moe_refusal(kn, mlp):
    """Why an MoE layer's feed-forward half cannot run in the host step (None: it can)."""
    if kn.moe_experts is None:
        return "the native MoeExperts is not routed at this SIMD level"
    if kn.amx_decode is not None:
        return "an MoE decoder with --dtype bf16 on the AMX tiles"
    if mlp.dense:
        return "every expert for every token (the exported graph's form)"
    if not mlp.silu or mlp.shared_experts.act is not mlp.act:
        return "an MoE layer not SiLU-gated"
    return None


class HostStep:
    """The decode step of runtime/decode.py's DecodeStep (read-only caches), its kernels called from the host (see
    the module's docstring). Built per cache reset and row count; `__call__` returns the logits [B, V] (Tensor)."""

    def __init__(self, model, plan, compiler):
        self.model, self.plan, self.compiler = model, plan, compiler
        self.rope_cell = RopeRows(model)
        self._rope = {}  # (axes, block) -> (cos, sin) numpy [ROPE_BLOCK, D]
        self._built = {}  # rows -> the step's buffers and calls over the current caches (None: not served)
        self._generation = None  # the caches' reset they name
        self.kn = self.refused = None  # the kernels bound, and why not served, as of that reset

    # ---- what the graph would run -----------------------------------------------------------------------------
    def serves(self, cache, rows):
        """Whether this step runs `rows` sequences over `cache` (every layer's kernel would be DecodeLayer,
        ops.decode_layer.serves); builds its buffers and calls on the first step of a cache's size."""
        if cache.in_graph:
            return False
        if not enabled():  # read at every step: switched back on, the step is decided and built again
            self.refused, self._generation = f"{ENV}=0", None
            return False
        if cache.generation != self._generation:  # the kernels bound now, the caches of this reset
            self._built, self._generation = {}, cache.generation
            self.kn = self.model.kernels
            self.refused = refusal(self.model, self.plan, cache)
        if rows not in self._built:
            self._built[rows] = self._build(cache, rows) if self.refused is None and self._kernels_serve(rows) \
                else None
        return self._built[rows] is not None

    def _kernels_serve(self, rows):
        if rows > MAX_ROWS:
            return False
        x = types.SimpleNamespace(shape=(rows, 1, self.model.cfg.text.hidden_size), dtype=ms.float32)
        for layer in self.model.text_layers():
            attn = layer.self_attn
            if not K.decode_layer_serves(self.kn, x, attn.k_cache, layer.decode_weights(), layer.silu_mlp or layer.moe):
                return False
            if layer.moe:
                router, *stacks = layer.mlp.routed_weights()[:4]
                h = types.SimpleNamespace(dtype=ms.float32)
                if router.dtype not in (ms.float32, ms.bfloat16) or not K.experts_native(self.kn, h, stacks):
                    return False
        head = self._head_weight()
        return head.dtype in (ms.float32, ms.bfloat16) or (self.model.head_quantized and self.kn.q8 is not None)

    def _head_weight(self):
        return self.model.model.embed_tokens.weight if self.model.tied else self.model.lm_head.weight

    def _head_entry(self, weight):
        """The head kernel logits() would take for a decode step's rows (ops.linear.matmul_t / matmul_t_q8); below
        the native kernel's size the graph multiplies with MindSpore's MatMul, here MatMulT's exact fp32 serves."""
        if self.model.head_quantized:
            return "MatMulTQ8"
        least = NATIVE_MIN_WEIGHT_BF16 if weight.dtype == ms.bfloat16 else NATIVE_MIN_WEIGHT
        big = weight.shape[0] * weight.shape[1] >= least
        return "MatMulTBf16" if self.kn.amx_decode is not None and weight.dtype == ms.bfloat16 and big else "MatMulT"

    # ---- the calls over the current caches -----------------------------------------------------------------------
    def _build(self, cache, rows):
        lib, model = self.kn.library, self.model
        hidden = model.cfg.text.hidden_size
        slots = cache.slots
        d = model.text_layers()[0].self_attn.head_dim
        b = types.SimpleNamespace()
        b.x = [np.zeros((rows, 1, hidden), np.float32) for _ in range(2)]
        b.cos = np.zeros((rows, 1, 1, d), np.float32)
        b.sin = np.zeros((rows, 1, 1, d), np.float32)
        b.mask = np.zeros((rows, 1, 1, slots), np.float32)
        b.h = np.zeros((rows, hidden), np.float32)  # the head's input: the final norm's output
        b.layers, b.moe, b.keep = [], [], []  # keep: what the arrays point to and nothing else holds
        for i, layer in enumerate(model.text_layers()):
            attn = layer.self_attn
            k_view, v_view = cache.views[i]
            kv_shape = (rows, attn.num_kv_heads, 1, attn.head_dim)
            k_out, v_out = np.zeros(kv_shape, np.float32), np.zeros(kv_shape, np.float32)
            b.keep += [k_out, v_out]
            weights = layer.decode_weights()
            scales = ()
            eps = [attn.eps]
            if layer.quantized:
                scales = (layer.q8_scales,)
                if layer.q8_group:
                    eps = [attn.eps, layer.q8_group]
            eps = np.array(eps, np.float32)
            b.keep.append(eps)
            operands = [Operand.of(b.x[i % 2]), Operand.of(b.cos), Operand.of(b.sin), Operand.of(b.mask),
                        Operand.of(k_view[:rows]), Operand.of(v_view[:rows])]
            operands += [Operand.of(w) for w in weights + scales]
            operands += [Operand.of(eps), Operand.of(b.x[(i + 1) % 2]), Operand.of(k_out), Operand.of(v_out)]
            b.layers.append(ArgArrays(operands))
            b.moe.append(None)
            if layer.moe:  # the router, the routed stacks (their scales) and {top_k, scaling}
                cfg = np.array([layer.mlp.top_k, layer.mlp.scaling], np.float32)
                b.keep.append(cfg)
                b.moe[-1] = ArgArrays([Operand.of(w) for w in layer.mlp.routed_weights()] + [Operand.of(cfg)])
        head = self._head_weight()
        owner = model.model.embed_tokens if model.tied else model.lm_head
        operands = [Operand.of(b.h), Operand.of(head)]
        if model.head_quantized:
            operands.append(Operand.of(owner.weight_scale))
        b.logits = np.zeros((rows, head.shape[0]), np.float32)
        b.head = ArgArrays(operands + [Operand.of(b.logits)])
        norm = model.model.norm
        b.norm_w = np.ascontiguousarray(norm.weight.asnumpy().astype(np.float32))
        b.write = np.zeros(rows, np.int64)
        # DecodeLayerBf16's products (the graph's choice under --dtype bf16 with AMX: ops.decode_layer.step)
        tiles = self.kn.amx_decode is not None
        b.step = StepCall(lib, b.layers, b.moe, tiles, b.write, b.norm_w, norm.eps,
                          HEAD_KINDS[self._head_entry(head)], b.head)
        b.embed = self._embedding(model)
        return b

    @staticmethod
    def _embedding(model):
        """ids [B] -> rows [B, H] fp32, read from the table's own buffer as embed() computes them (an id outside
        the table: a zero row, as the graph's Gather and GatherRows give)."""
        table = model.model.embed_tokens

        def take(array, ids):
            inside = (ids >= 0) & (ids < array.shape[0])
            out = array[np.where(inside, ids, 0)]
            out[~inside] = 0
            return out
        if model.head_quantized and model.tied:  # q[ids] * scale[ids] (ops.embedding_rows_q8)
            q, scale = table.weight.asnumpy(), table.weight_scale.asnumpy()

            def dequantised(ids):
                r, s = take(q, ids).astype(np.float32), take(scale, ids)
                if s.ndim == 1:
                    return r * s[:, None]
                return (r.reshape(len(ids), s.shape[-1], -1) * s[..., None]).reshape(len(ids), -1)
            return dequantised
        words = table.weight.asnumpy()
        if table.weight.dtype == ms.bfloat16:  # widened exactly: a bf16 word is the high half of its fp32 word
            words = words.view(np.uint16)
            return lambda ids: (take(words, ids).astype(np.uint32) << 16).view(np.float32)
        return lambda ids: take(words, ids).astype(np.float32)

    def _rope_rows(self, positions, axes):
        """cos, sin [B, D] at `positions` [B] (every axis at the same position, as in a decode step)."""
        blocks = np.floor_divide(positions, ROPE_BLOCK)
        cos = np.empty((len(positions), self.model.text_layers()[0].self_attn.head_dim), np.float32)
        sin = np.empty_like(cos)
        for i, (p, blk) in enumerate(zip(positions, blocks)):
            key = (axes, int(blk))
            if key not in self._rope:
                if len(self._rope) >= ROPE_BLOCKS_KEPT:
                    del self._rope[next(iter(self._rope))]  # the oldest block computed
                pos = np.arange(blk * ROPE_BLOCK, (blk + 1) * ROPE_BLOCK, dtype=np.int32)
                pos = np.ascontiguousarray(np.broadcast_to(pos[None, :, None], (axes, ROPE_BLOCK, 1)))
                c, s = self.compiler.call("decode", self.rope_cell, Tensor(pos))
                self._rope[key] = (c.asnumpy().reshape(ROPE_BLOCK, -1), s.asnumpy().reshape(ROPE_BLOCK, -1))
            c, s = self._rope[key]
            cos[i], sin[i] = c[p - blk * ROPE_BLOCK], s[p - blk * ROPE_BLOCK]
        return cos, sin

    def __call__(self, cache, tokens, positions, write, slot_ids, axes):
        """tokens, positions (rope), write (cache slots) [B] for the first B rows -> logits [B, V] (Tensor)."""
        rows = len(tokens)
        b = self._built[rows]
        b.x[0][:, 0] = b.embed(np.asarray(tokens, np.int64))
        cos, sin = self._rope_rows(np.asarray(positions, np.int64), axes)
        b.cos[:, 0, 0], b.sin[:, 0, 0] = cos, sin
        b.mask[:, 0, 0] = np.where(slot_ids[None, :] <= (write[:, None] - 1), np.float32(0), np.float32(NEG_BIAS))
        b.write[:] = write
        b.step()  # every layer, its k, v stored at its row's slot, the final norm and the head
        return Tensor.from_numpy(b.logits.copy())
