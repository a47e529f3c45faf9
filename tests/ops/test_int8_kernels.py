"""Weight-only int8 in the native kernels (ms_ocr/ops/native/gemv.h, quant.cc): MatMulTQ8 (a decode step's rows against
an int8 weight with one fp32 scale per row, or per group of 32 / 64 columns), DequantQ8 (q * scale in fp32) and
DecodeLayer over int8 matrices with their scales packed in one input; each against float64 NumPy over the
dequantised weights, at every SIMD level this machine builds."""

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

from ms_ocr.convert.quantize import quantize_rows as quantize  # symmetric int8 (tests/test_quantize.py)
from ms_ocr.ops import custom
from tests.helpers.native import KERNEL_REFUSED, needs_compiler, op_cell
from tests.helpers.quant import dequantized
from tests.ops.test_gemm_bf16 import rne_bf16
from tests.ops.test_decode_layer import CASES, make_case, reference


@needs_compiler
@pytest.mark.parametrize("m,group", [(1, 0), (3, 0), (8, 0), (1, 32), (2, 64), (7, 32), (8, 64)])
def test_matmul_t_q8_at_every_isa_level(m, group, graph_cpu, isa_kernels):
    """Per row, the columns not a multiple of the vector (1,003); per group, 1,024 columns, and rows that leave
    single-row blocks after the several-row ones (301)."""
    rng = np.random.default_rng(m + group)
    cols = 1024 if group else 1003
    w = rng.standard_normal((301, cols)) * rng.uniform(0.01, 3, (1, cols))  # columns of different sizes
    q, s = quantize(w, group=group)
    assert s.shape == ((301, cols // group) if group else (301,))
    x = rng.standard_normal((m, cols)).astype(np.float32)
    want = x.astype(np.float64) @ dequantized(q, s).T
    before = isa_kernels.matmul_t_calls
    got = op_cell(custom.int8_ops(isa_kernels)[0])(Tensor(x), Tensor(q), Tensor(s)).asnumpy()
    assert isa_kernels.matmul_t_calls == before + 1
    assert got.shape == (m, 301) and np.abs(got - want).max() <= 2e-5 * np.abs(want).max(), isa_kernels.isa_level


@needs_compiler
@pytest.mark.parametrize("group", [0, 32])
def test_dequant_q8_is_q_times_scale(group, graph_cpu, isa_kernels):
    rng = np.random.default_rng(4)
    q, s = quantize(rng.standard_normal((70, 352 if group else 333)), group=group)
    want = dequantized(q, s).astype(np.float32)  # exact: q * scale in fp32 rounds once, as float64's rounded
    got = op_cell(custom.int8_ops(isa_kernels)[1])(Tensor(q), Tensor(s)).asnumpy()
    assert np.array_equal(got, want)
    # for products in bf16: the same values rounded to bf16, nearest-even
    bf16 = op_cell(custom.int8_ops(isa_kernels)[2])(Tensor(q), Tensor(s)).astype(ms.float32).asnumpy()
    assert np.array_equal(bf16, rne_bf16(want))


@needs_compiler
@pytest.mark.parametrize("group", [0, 32, 64])
def test_native_quantiser_is_numpys_bit_for_bit(group, isa_kernels, monkeypatch):
    """The load-time quantiser on the kernels' threads (quantize_array's native path) against quantize_rows in
    NumPy: the same int8 values and scales, from fp32 and from raw bf16 words, with rows of zeros, values on the
    rounding ties (x.5: to even) and, per row, columns that are not whole vectors (1,003)."""
    from ms_ocr.convert.safetensors_io import widen_bf16
    from ms_ocr.convert import quantize as qmod
    monkeypatch.setattr(qmod, "_native_kernels", lambda: isa_kernels)
    rng = np.random.default_rng(11 + group)
    cols = 1024 if group else 1003
    w = (rng.standard_normal((67, cols)) * rng.uniform(0.01, 3, (1, cols))).astype(np.float32)
    w[3] = 0
    w[5, :] = rng.integers(-126, 127, cols) + 0.5  # scale 1 with the peak below: every value a tie
    w[5, 0] = 127
    words = (w.view(np.uint32) >> 16).astype(np.uint16)  # bf16 by truncation: raw words as a checkpoint has them
    for src, ref in ((w, w), (words, widen_bf16(words))):
        want_q, want_s = quantize(ref, group=group)
        out = np.full(w.shape, 99, np.int8)
        q, s = qmod.quantize_array(src, out, group=group)
        assert q is out and np.array_equal(q, want_q) and np.array_equal(s, want_s), isa_kernels.isa_level
    assert np.array_equal(want_q[5, 1:6], np.rint(w[5, 1:6])) and want_s[3].max() == 1  # ties to even; zero rows
    with pytest.raises(ValueError, match="multiple"):
        qmod.quantize_array(w[:, :1000], group=64)


@needs_compiler
def test_q8_kernels_refuse_groups_that_do_not_fit(pynative_cpu, isa_kernels):
    """Scales [N, g] whose group (K / g) is not whole vectors, or does not divide K: an error, not a misread."""
    rng = np.random.default_rng(8)
    q, _ = quantize(rng.standard_normal((16, 96)))
    x = Tensor(rng.standard_normal((1, 96)).astype(np.float32))
    for groups in (12, 5):  # groups of 8 columns; 96 / 5 columns
        s = Tensor(np.ones((16, groups), np.float32))
        with pytest.raises(RuntimeError, match=KERNEL_REFUSED):
            op_cell(custom.int8_ops(isa_kernels)[0])(x, Tensor(q), s).asnumpy()
        with pytest.raises(RuntimeError, match=KERNEL_REFUSED):
            op_cell(custom.int8_ops(isa_kernels)[1])(Tensor(q), s).asnumpy()


@pytest.mark.parametrize("group", [0, 32])
def test_int8_embedding_rows_are_the_dequantised_rows(group, graph_cpu):
    """A tied head's int8 table (--quantize int8[-g32]): the lookup gives q[ids] * scale[ids] exactly, ids of any
    shape, repeated ids and the table's last row included."""
    from ms_ocr.ops import embedding_rows_q8
    rng = np.random.default_rng(6)
    q, s = quantize(rng.standard_normal((517, 96)) * rng.uniform(0.01, 2, (517, 1)), group=group)
    ids = np.array([[0, 516, 7, 7], [300, 1, 516, 42]], np.int32)
    got = op_cell(embedding_rows_q8)(Tensor(q), Tensor(s), Tensor(ids)).asnumpy()
    assert got.dtype == np.float32 and got.shape == (2, 4, 96)
    assert np.array_equal(got, dequantized(q, s).astype(np.float32)[ids])


def _groups_fit(case, group):
    """Whether every matrix of a decode-layer case (b, hidden, hq, hkv, d, inter, ...) has columns in whole groups:
    q, k, v, gate and up take hidden columns, o hq * d, down inter."""
    _, hidden, hq, _, d, inter = case[:6]
    return all(k % group == 0 for k in (hidden, hq * d, inter)) if group else True


@needs_compiler
@pytest.mark.parametrize("case, group", [(c, g) for g in (0, 16) for c in CASES if _groups_fit(c, g)])
def test_decode_layer_over_int8_matrices(case, group, graph_cpu, isa_kernels):
    """The 7 matrices (q, k, v, o, gate, up, down) in int8, their scales packed in that order before eps: one per
    row, or (eps [2] = {eps, G}) one per group of G columns, each matrix's [N, K / G] flattened (the cases whose
    matrices are whole groups)."""
    *tensors, weights = make_case(np.random.default_rng(11), *case)
    qk_norm = len(weights) == 11
    mats = [1, 2, 3] + ([6, 8, 9, 10] if qk_norm else [4, 6, 7, 8])
    assert not group or all(weights[i].shape[1] % group == 0 for i in mats)
    args, scales, deq = list(weights), [], list(weights)
    for i in mats:
        q, s = quantize(weights[i], group=group)
        args[i], deq[i] = q, dequantized(q, s).astype(np.float32)
        scales.append(s.ravel())
    op = custom.native_ops(isa_kernels)[1][1 if qk_norm else 0]
    before = isa_kernels.decode_layer_calls
    eps = [1e-6, group] if group else [1e-6]
    outs = op_cell(op)(*(Tensor(a) for a in tensors), *(Tensor(w) for w in args), Tensor(np.concatenate(scales)),
                   Tensor(np.array(eps, np.float32)))
    assert isa_kernels.decode_layer_calls == before + 1
    for got, want in zip(outs, reference(*tensors, deq, 1e-6)):
        assert np.abs(got.asnumpy() - want).max() <= 2e-5 * max(1.0, np.abs(want).max()), isa_kernels.isa_level
