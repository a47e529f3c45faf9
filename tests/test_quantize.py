"""--quantize int8's load-time quantisation (ms_ocr/models/quantize.py) and where it is refused. Its agreement with
transformers on the dequantised weights is tests/matrix/suite.py's, its accuracy on trained weights the demo gate's
(tests/demo/test_gate.py), its kernels tests/ops/test_int8_kernels.py's."""

import numpy as np
import pytest

from ms_ocr.models.loading import load_pipeline
from ms_ocr.models.quantize import quantize_rows
from tests.cli_util import assert_one_line_error, run_module


def test_rows_are_symmetric_int8_within_half_a_step():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((40, 96)).astype(np.float32) * rng.uniform(0.01, 3, (40, 1)).astype(np.float32)
    w[5] = 0.0  # an all-zero row keeps scale 1 and zeros
    q, s = quantize_rows(w)
    assert q.dtype == np.int8 and s.dtype == np.float32 and q.shape == w.shape and s.shape == (40,)
    assert (np.abs(q).max(1)[np.arange(40) != 5] == 127).all() and s[5] == 1 and not q[5].any()
    assert (np.abs(q.astype(np.float64) * s[:, None] - w) <= 0.5 * s[:, None] * (1 + 1e-6)).all()


def test_refused_on_ascend_and_unknown_modes():
    args = ("x", "/nonexistent", None, None, None, None, None, 1, 0.0)
    with pytest.raises(ValueError, match="CPU-only"):
        load_pipeline(*args, target="Ascend", quantize="int8")
    with pytest.raises(ValueError, match="unknown --quantize"):
        load_pipeline(*args, quantize="int4")


@pytest.mark.parametrize("module", ["ms_ocr.infer", "ms_ocr.batch", "ms_ocr.serve", "ms_ocr.pipeline"])
def test_every_command_line_takes_the_option(module):
    proc = run_module(module, "--help")
    assert proc.returncode == 0 and "--quantize {none,int8}" in proc.stdout
    assert_one_line_error(run_module(module, "--quantize", "int4"), "--quantize")
