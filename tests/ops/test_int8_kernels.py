"""Weight-only int8 in the native kernels (ms_ocr/ops/native/kernels.cc): MatMulTQ8 (a decode step's rows against
an int8 weight with one fp32 scale per row), DequantQ8 (q * scale in fp32) and DecodeLayer over int8 matrices with
their scales packed in one input; each against float64 NumPy over the dequantised weights, at every SIMD level this
machine builds."""

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

from ms_ocr.models.quantize import quantize_rows as quantize  # per-row symmetric int8 (tests/test_quantize.py)
from ms_ocr.ops import backend
from tests.helpers.native import needs_compiler, op_cell
from tests.ops.test_gemm_bf16 import rne_bf16
from tests.ops.test_decode_layer import CASES, make_case, reference


def dequantized(q, scale):
    return q.astype(np.float64) * scale.astype(np.float64)[:, None]


@needs_compiler
@pytest.mark.parametrize("m", [1, 3, 8])
def test_matmul_t_q8_at_every_isa_level(m, graph_cpu, isa_kernels):
    rng = np.random.default_rng(m)
    q, s = quantize(rng.standard_normal((301, 1000 + 3)))
    x = rng.standard_normal((m, 1003)).astype(np.float32)
    want = x.astype(np.float64) @ dequantized(q, s).T
    before = isa_kernels.matmul_t_calls
    got = op_cell(backend.int8_ops(isa_kernels)[0])(Tensor(x), Tensor(q), Tensor(s)).asnumpy()
    assert isa_kernels.matmul_t_calls == before + 1
    assert got.shape == (m, 301) and np.abs(got - want).max() <= 2e-5 * np.abs(want).max(), isa_kernels.isa_level


@needs_compiler
def test_dequant_q8_is_q_times_scale(graph_cpu, isa_kernels):
    rng = np.random.default_rng(4)
    q, s = quantize(rng.standard_normal((70, 333)))
    got = op_cell(backend.int8_ops(isa_kernels)[1])(Tensor(q), Tensor(s)).asnumpy()
    assert np.array_equal(got, q.astype(np.float32) * s[:, None])
    # for products in bf16: the same values rounded to bf16, nearest-even
    bf16 = op_cell(backend.int8_ops(isa_kernels)[2])(Tensor(q), Tensor(s)).astype(ms.float32).asnumpy()
    assert np.array_equal(bf16, rne_bf16(q.astype(np.float32) * s[:, None]))


def test_int8_embedding_rows_are_the_dequantised_rows(graph_cpu):
    """A tied head's int8 table (--quantize int8): the lookup gives q[ids] * scale[ids] exactly, ids of any shape,
    repeated ids and the table's last row included."""
    from ms_ocr.ops import embedding_rows_q8
    rng = np.random.default_rng(6)
    q, s = quantize(rng.standard_normal((517, 96)) * rng.uniform(0.01, 2, (517, 1)))
    ids = np.array([[0, 516, 7, 7], [300, 1, 516, 42]], np.int32)
    got = op_cell(embedding_rows_q8)(Tensor(q), Tensor(s), Tensor(ids)).asnumpy()
    assert got.dtype == np.float32 and got.shape == (2, 4, 96)
    assert np.array_equal(got, q[ids].astype(np.float32) * s[ids][..., None])


@needs_compiler
@pytest.mark.parametrize("case", CASES)
def test_decode_layer_over_int8_matrices(case, graph_cpu, isa_kernels):
    """The 7 matrices (q, k, v, o, gate, up, down) in int8, their scales packed in that order before eps."""
    *tensors, weights = make_case(np.random.default_rng(11), *case)
    qk_norm = len(weights) == 11
    mats = [1, 2, 3] + ([6, 8, 9, 10] if qk_norm else [4, 6, 7, 8])
    args, scales, deq = list(weights), [], list(weights)
    for i in mats:
        q, s = quantize(weights[i])
        args[i], deq[i] = q, dequantized(q, s).astype(np.float32)
        scales.append(s)
    op = backend.native_ops(isa_kernels)[1][1 if qk_norm else 0]
    before = isa_kernels.decode_layer_calls
    outs = op_cell(op)(*(Tensor(a) for a in tensors), *(Tensor(w) for w in args), Tensor(np.concatenate(scales)),
                   Tensor(np.array([1e-6], np.float32)))
    assert isa_kernels.decode_layer_calls == before + 1
    for got, want in zip(outs, reference(*tensors, deq, 1e-6)):
        assert np.abs(got.asnumpy() - want).max() <= 2e-5 * max(1.0, np.abs(want).max()), isa_kernels.isa_level
