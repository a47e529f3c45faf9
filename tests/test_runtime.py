"""CompileTimer: one compile per input-shape key, later calls go straight to the graph executor with the same
results as Cell.__call__ (and see parameters updated in place)."""

import numpy as np
from mindspore import Parameter, Tensor, nn

from ms_ocr.runtime import _NO_FAST_PATH, CompileTimer


class _Affine(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(np.array([2.0, -1.0, 0.5], np.float32)), name="w")

    def construct(self, x, b):
        return x * self.w + b, x.sum()


def _no_cell_call(*args, **kwargs):
    raise AssertionError("Cell.__call__ was used for an already-compiled shape")


def test_compile_timer_reuses_compiled_graphs_without_cell_call(graph_mode, monkeypatch):
    timer, cell = CompileTimer(), _Affine()
    w = np.array([2.0, -1.0, 0.5], np.float32)
    b = np.array([0.25, 0.5, 0.75], np.float32)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out, total = timer.call("step", cell, Tensor(x), Tensor(b))
    np.testing.assert_array_equal(out.asnumpy(), x * w + b)
    assert timer.seconds["step"] > 0
    assert [v for v in timer._phases.values()] != [_NO_FAST_PATH]  # MindSpore 2.10 has the executor internals

    monkeypatch.setattr(nn.Cell, "__call__", _no_cell_call)
    x2 = x * 3 - 1
    out, total = timer.call("step", cell, Tensor(x2), Tensor(b))
    np.testing.assert_array_equal(out.asnumpy(), x2 * w + b)
    assert float(total.asnumpy()) == float(x2.sum())
    cell.w.set_data(Tensor(w * 10))  # the graph reads the Parameter, not a copy taken at compile time
    np.testing.assert_array_equal(timer.call("step", cell, Tensor(x2), Tensor(b))[0].asnumpy(), x2 * w * 10 + b)

    monkeypatch.undo()
    seconds = timer.seconds["step"]
    x3 = np.ones((4, 3), np.float32)
    np.testing.assert_array_equal(timer.call("step", cell, Tensor(x3), Tensor(b))[0].asnumpy(), x3 * w * 10 + b)
    assert timer.seconds["step"] > seconds and len(timer._phases) == 2
