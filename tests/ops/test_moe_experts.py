"""The native MoeExperts (ms_ocr/ops/native/moe.cc): a decode step's routed experts of a DeepSeek MoE layer read
from the stacked weights as they are stored (fp32, bf16, int8 with scales per row or per group of columns), against
float64 NumPy over the same values, at every SIMD level this machine builds; and the MoE layer through it against
its composed path (gather the selected experts, batched matmuls)."""

import dataclasses

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

from ms_ocr.convert.loader import round_to_bf16
from ms_ocr.convert.quantize import quantize_rows
from ms_ocr.ops import bind, custom
from tests.helpers.native import KERNEL_REFUSED, needs_compiler, op_cell
from tests.helpers.quant import dequantized


def reference(h, ids, w, gate, up, down):
    """float64: y[t] = sum_j w[t, j] * down[e] (silu(gate[e] h[t]) * up[e] h[t]), e = ids[t, j]; an id outside
    the stack adds nothing."""
    y = np.zeros(h.shape, np.float64)
    for t in range(h.shape[0]):
        for j, e in enumerate(ids[t]):
            if not 0 <= e < gate.shape[0]:
                continue
            g, u = gate[e] @ h[t], up[e] @ h[t]
            y[t] += w[t, j] * (down[e] @ (g / (1 + np.exp(-g)) * u))
    return y


def quantize_stack(stack, group):
    """[E, N, K] -> (int8 [E, N, K], scales [E, N] or [E, N, K / group], dequantised float64 [E, N, K])"""
    parts = [quantize_rows(m, group=group) for m in stack]
    q, s = np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts])
    return q, s, np.stack([dequantized(a, b) for a, b in parts])


# tokens, hidden, experts, intermediate, k: several tokens sharing an expert (and an id outside the stack); one
# token over DeepSeek's 64 experts, top 6
CASES = [(3, 48, 6, 32, 3), (1, 128, 64, 96, 6)]


@needs_compiler
@pytest.mark.parametrize("kind", ["fp32", "bf16", "int8", "int8-g16"])
@pytest.mark.parametrize("case", CASES)
def test_moe_experts_at_every_isa_level(case, kind, graph_cpu, isa_kernels):
    t, hidden, experts, inter, k = case
    rng = np.random.default_rng(hidden + k)
    h = rng.standard_normal((t, hidden)).astype(np.float32)
    ids = np.stack([rng.choice(experts, k, replace=False) for _ in range(t)]).astype(np.int32)
    if t > 1:
        ids[1, 0] = ids[0, 0]  # two tokens share an expert
        ids[-1, -1] = experts  # an id outside the stack adds nothing
    w = rng.uniform(0.05, 1, (t, k)).astype(np.float32)
    stacks = [rng.standard_normal(shape) / np.sqrt(shape[-1]) for shape in
              ((experts, inter, hidden), (experts, inter, hidden), (experts, hidden, inter))]
    if kind == "fp32":
        args = [Tensor(s.astype(np.float32)) for s in stacks]
        values = [s.astype(np.float32) for s in stacks]
    elif kind == "bf16":
        values = [round_to_bf16(s.astype(np.float32)) for s in stacks]
        args = [Tensor(v).astype(ms.bfloat16) for v in values]
    else:
        group = 16 if kind == "int8-g16" else 0
        parts = [quantize_stack(s, group) for s in stacks]
        args = [Tensor(p[0]) for p in parts] + [Tensor(p[1]) for p in parts]
        values = [p[2] for p in parts]
    want = reference(h.astype(np.float64), ids, w.astype(np.float64), *(v.astype(np.float64) for v in values))
    op = custom.native_ops(isa_kernels)[5]
    before = isa_kernels.moe_experts_calls
    got = op_cell(op)(Tensor(h), Tensor(ids), Tensor(w), *args).asnumpy()
    assert isa_kernels.moe_experts_calls == before + 1
    assert got.dtype == np.float32 and got.shape == (t, hidden)
    assert np.abs(got - want).max() <= 2e-5 * np.abs(want).max(), isa_kernels.isa_level


@needs_compiler
def test_moe_experts_refuses_stacks_that_do_not_fit(pynative_cpu, isa_kernels):
    rng = np.random.default_rng(2)
    h, ids, w = (Tensor(rng.standard_normal((1, 32)).astype(np.float32)), Tensor(np.array([[0, 1]], np.int32)),
                 Tensor(np.ones((1, 2), np.float32)))
    gate = Tensor(rng.standard_normal((4, 16, 32)).astype(np.float32))
    down = Tensor(rng.standard_normal((4, 32, 16)).astype(np.float32))
    op = op_cell(custom.native_ops(isa_kernels)[5])
    with pytest.raises(RuntimeError, match=KERNEL_REFUSED):  # down [E, H, I] given where up [E, I, H] belongs
        op(h, ids, w, gate, down, down).asnumpy()
    q = Tensor(np.zeros((4, 16, 32), np.int8))
    with pytest.raises(RuntimeError, match=KERNEL_REFUSED):  # int8 stacks without scales
        op(h, ids, w, q, q, Tensor(np.zeros((4, 32, 16), np.int8))).asnumpy()


@needs_compiler
@pytest.mark.parametrize("dtype", [ms.float32, ms.bfloat16])
def test_moe_layer_through_the_kernel_matches_its_composed_path(dtype, graph_cpu, monkeypatch):
    """DeepSeek's MoE layer (routed + shared experts) in decode: the native kernel against the gather-and-batched-
    matmul path, on the same weights (fp32, or a bf16 stack kept in bf16)."""
    from mindspore import nn

    from ms_ocr.nn.moe import MoE
    rng = np.random.default_rng(9)
    layer = MoE(64, 48, num_experts=8, top_k=3, num_shared=2, scaling=1.5)
    for p in layer.get_parameters():
        value = round_to_bf16(rng.standard_normal(p.shape).astype(np.float32) / np.sqrt(p.shape[-1]))
        p.set_data(Tensor(value).astype(dtype if p.name.startswith("experts.") else ms.float32))

    class Run(nn.Cell):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def construct(self, x):
            return self.layer(x)

    x = Tensor(rng.standard_normal((3, 1, 64)).astype(np.float32))
    kn = graph_cpu
    if kn.moe_experts is None:
        pytest.skip("MoeExperts is not routed at this build's SIMD level")
    kernels = kn.library
    before = kernels.moe_experts_calls
    bind(layer, kn)
    got = Run()(x).asnumpy()
    assert kernels.moe_experts_calls == before + 1
    bind(layer, dataclasses.replace(kn, moe_experts=None))  # the composed path
    want = Run()(x).asnumpy()
    assert kernels.moe_experts_calls == before + 1
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
