"""The native InterpRows (ms_ocr/ops/native/gather.cc), which ops.interp_rows uses on the CPU to resample a ViT's
learned position table to an image's patch grid (4 bilinear taps per patch) without [N, 4, C] intermediates:
against float64 NumPy for fp32 and bf16 tables at every ISA level this machine builds, the routing, and the
composed gather-multiply-sum it replaces. The vision parity tests run it inside PaddleOCR-VL's and HunyuanOCR's
patch embeddings against transformers."""

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn

from ms_ocr import ops as K
from ms_ocr.convert.loader import round_to_bf16
from ms_ocr.ops import custom
from ms_ocr.processing import grid as G
from tests.helpers.native import needs_compiler


class _Interp(nn.Cell):
    def __init__(self, op=None, kn=None):
        super().__init__()
        self.op, self.kn = op, kn

    def construct(self, table, idx, w):
        if self.op is not None:
            return self.op(table, idx, w)
        return K.interp_rows(self.kn, table, idx, w)


def _case(rng, side=27, dim=72, grid=(1, 31, 45)):
    table = round_to_bf16(rng.standard_normal((side * side, dim)))
    idx, w = G.interpolation_table([grid], side)
    return table, idx, w


def reference(table, idx, w):
    rows = np.where((idx < table.shape[0])[..., None], table[np.minimum(idx, table.shape[0] - 1)], 0.0)
    return (rows.astype(np.float64) * w[..., None].astype(np.float64)).sum(1)


@needs_compiler
def test_interp_rows_at_every_isa_level(graph_cpu, isa_kernels):
    """fp32 and bf16 tables (the same values) give the same rows, within float64's by fp32 rounding; an index
    outside the table adds nothing."""
    op = custom.bf16_ops(isa_kernels)[2]
    table, idx, w = _case(np.random.default_rng(1))
    idx[7, 3] = table.shape[0] + 2
    ref = reference(table, idx, w)
    fp32 = _Interp(op)(Tensor(table), Tensor(idx), Tensor(w)).asnumpy()
    bf16 = _Interp(op)(Tensor(table).astype(ms.bfloat16), Tensor(idx), Tensor(w)).asnumpy()
    assert fp32.shape == ref.shape and np.abs(fp32 - ref).max() <= 1e-6 * np.abs(ref).max(), isa_kernels.isa_level
    assert np.array_equal(fp32, bf16), isa_kernels.isa_level


@needs_compiler
def test_interp_rows_routing(graph_cpu):
    """fp32 taps take the kernel on the CPU; graphs built for export take the composed gather, which computes the
    same to fp32 rounding."""
    table, idx, w = _case(np.random.default_rng(2), grid=(1, 64, 40))
    kn = graph_cpu
    assert kn.interp_rows is not None
    kernel = _Interp(kn=kn)(Tensor(table), Tensor(idx), Tensor(w)).asnumpy()
    assert kn.without_native().interp_rows is None
    composed = _Interp(kn=kn.without_native())(Tensor(table), Tensor(idx), Tensor(w)).asnumpy()
    ref = reference(table, idx, w)
    assert np.abs(kernel - ref).max() <= 1e-6 * np.abs(ref).max()
    assert np.abs(composed - ref).max() <= 1e-6 * np.abs(ref).max()
