"""--quantize int8's load-time quantisation (ms_ocr/convert/quantize.py, ms_ocr/models/quantize.py) and where it is
refused. Its agreement with transformers on the dequantised weights is tests/matrix/suite.py's, its accuracy on trained
weights the demo gate's (tests/demo/test_gate.py), its kernels tests/ops/test_int8_kernels.py's."""

import numpy as np
import pytest

from ms_ocr.models.loading import load_pipeline
from ms_ocr.convert.quantize import quantize_rows
from tests.cli_util import assert_one_line_error, run_module


def test_rows_are_symmetric_int8_within_half_a_step():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((40, 96)).astype(np.float32) * rng.uniform(0.01, 3, (40, 1)).astype(np.float32)
    w[5] = 0.0  # an all-zero row keeps scale 1 and zeros
    q, s = quantize_rows(w)
    assert q.dtype == np.int8 and s.dtype == np.float32 and q.shape == w.shape and s.shape == (40,)
    assert (np.abs(q).max(1)[np.arange(40) != 5] == 127).all() and s[5] == 1 and not q[5].any()
    assert (np.abs(q.astype(np.float64) * s[:, None] - w) <= 0.5 * s[:, None] * (1 + 1e-6)).all()


@pytest.mark.parametrize("group", [32, 64])
def test_groups_are_symmetric_int8_within_half_a_step(group):
    """int8-g32 / int8-g64: a scale per group of columns ([N, K / G]); each group's largest weight is +-127, the
    others within half its own step; an all-zero group keeps scale 1."""
    rng = np.random.default_rng(group)
    spread = np.repeat(rng.uniform(0.01, 3, (24, 8)), 32, 1)  # a size per 32 columns of a row
    w = (rng.standard_normal((24, 256)) * spread).astype(np.float32)
    w[3, group:2 * group] = 0.0
    q, s = quantize_rows(w, group=group)
    n = 256 // group
    assert q.dtype == np.int8 and s.dtype == np.float32 and s.shape == (24, n)
    runs, steps = q.reshape(24, n, group), s[..., None]
    zero = np.zeros((24, n), bool)
    zero[3, 1] = True
    assert (np.abs(runs).max(2)[~zero] == 127).all() and s[3, 1] == 1 and not runs[3, 1].any()
    assert (np.abs(runs * steps.astype(np.float64) - w.reshape(24, n, group)) <= 0.5 * steps * (1 + 1e-6)).all()
    # finer steps than one scale per row: the same matrix's error is smaller
    q_row, s_row = quantize_rows(w)
    err_row = np.abs(q_row * s_row[:, None].astype(np.float64) - w).mean()
    assert np.abs(runs * steps.astype(np.float64) - w.reshape(24, n, group)).mean() < 0.8 * err_row


def test_a_group_that_does_not_divide_a_matrix_is_refused():
    from ms_ocr.models.quantize import prepare_int8
    from ms_ocr.ops import COMPOSED
    from ms_ocr.plan import Plan

    class Linear:
        def __init__(self, name, shape):
            self.weight = type("P", (), {"name": name, "shape": shape})()

    class Net:
        tied = False
        lm_head = Linear("lm_head.weight", (100, 96))

        def text_layers(self):
            return []

    def plan(quantize):
        return Plan("CPU", COMPOSED, None, quantize=quantize)

    with pytest.raises(ValueError, match="96 columns, not a multiple of 64"):
        prepare_int8(Net(), plan("int8-g64"))
    assert prepare_int8(Net(), plan("int8-g32")).group == 32


def test_array_quantised_in_chunks_into_a_given_buffer_is_the_whole_matrix_quantised(monkeypatch):
    """quantize_array without the native kernels (the loader: raw bf16 words, row chunks written into the pool
    tensor's memory) gives what
    quantize_rows gives for the whole widened matrix, across chunk boundaries and a short last chunk."""
    from ms_ocr.convert.safetensors_io import widen_bf16
    from ms_ocr.convert import quantize
    monkeypatch.setattr(quantize, "CHUNK_ROWS", 16)
    monkeypatch.setattr(quantize, "_native_kernels", lambda: None)  # NumPy's chunks (the native path: test_int8_kernels)
    rng = np.random.default_rng(5)
    words = (rng.standard_normal((53, 40), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    want_q, want_s = quantize_rows(widen_bf16(words))
    out = np.full((53, 40), 99, np.int8)
    q, s = quantize.quantize_array(words, out)
    assert q is out and np.array_equal(out, want_q) and np.array_equal(s, want_s)
    q2, s2 = quantize.quantize_array(words)
    assert np.array_equal(q2, want_q) and np.array_equal(s2, want_s)
    want_q, want_s = quantize_rows(widen_bf16(words), group=8)  # groups: the same, a row of scales per row
    q3, s3 = quantize.quantize_array(words, group=8)
    assert s3.shape == (53, 5) and np.array_equal(q3, want_q) and np.array_equal(s3, want_s)


@pytest.mark.parametrize("group", [0, 32])
def test_expert_stack_quantised_slice_by_slice_is_the_whole_stack_quantised(group):
    """A MoE stack [E, N, K] (--quantize int8 of DeepSeek's experts) arrives one expert at a time, in any order, as
    raw bf16 words: each slice quantised into the int8 pool tensor as it comes gives what quantize_array gives for
    the whole stack (and [E, N] / [E, N, K / G] scales)."""
    from mindspore import Parameter, Tensor

    from ms_ocr.convert.loader import _Stack
    from ms_ocr.convert.safetensors_io import widen_bf16
    from ms_ocr.convert.quantize import quantize_array
    rng = np.random.default_rng(group + 1)
    words = (rng.standard_normal((5, 24, 64), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    stack = _Stack(words.shape, True, group)
    for e in (3, 0, 4, 1, 2):
        stack.put(e, words[e], None)
    param = Parameter(Tensor(np.zeros(1, np.float32)), name="experts.up_proj")
    scale = Parameter(Tensor(np.zeros(1, np.float32)), name="experts.up_proj_scale")
    stack.store(param, None, scale)
    want_q, want_s = quantize_array(widen_bf16(words), group=group)
    assert str(param.dtype) == "Int8" and np.array_equal(param.asnumpy(), want_q)
    assert want_s.shape == ((5, 24, 2) if group else (5, 24)) and np.array_equal(scale.asnumpy(), want_s)


def test_refused_on_ascend_and_unknown_modes():
    args = ("x", "/nonexistent", None, None, None, None, None, 1, 0.0)
    with pytest.raises(ValueError, match="CPU-only"):
        load_pipeline(*args, target="Ascend", quantize="int8")
    with pytest.raises(ValueError, match="unknown --quantize"):
        load_pipeline(*args, quantize="int4")


@pytest.mark.parametrize("module", ["ms_ocr.infer", "ms_ocr.batch", "ms_ocr.serve", "ms_ocr.pipeline"])
def test_every_command_line_takes_the_option(module):
    proc = run_module(module, "--help")
    assert proc.returncode == 0 and "--quantize {none,int8,int8-g64,int8-g32}" in proc.stdout
    assert_one_line_error(run_module(module, "--quantize", "int4"), "--quantize")


@pytest.fixture(scope="module")
def int8_paddle(graph_mode, tiny_checkpoint):
    from ms_ocr.models.paddleocr_vl import SPEC
    from ms_ocr.runtime import Buckets
    folder = tiny_checkpoint("hub", "json", "bfloat16", "100KB")
    return SPEC.load(folder, "CPU", "auto", Buckets(prefill=32, slots=64), quantize="int8")


def test_more_sequences_than_the_kernel_takes_decode_the_same(int8_paddle):
    """9 sequences decode through the composed layers over the dequantised matrices, 3 through DecodeLayer over the
    int8 ones: the same logits for the same sequences (to fp32 summation order), step after step."""
    from bench.pages import text_page
    pipe = int8_paddle
    rt = pipe.runtime
    assert all(layer.quantized for layer in rt.model.text_layers()) and str(rt.model.text_layers()[0]
                                                                              .mlp.up_proj.weight.dtype) == "Int8"
    preps = [pipe.prepare([text_page(84, 112, f"row {i % 3}")], "OCR:")[0] for i in range(9)]
    kn = rt.plan.kernels
    kernels = kn.library if kn.decode_layer is not None else None
    out = {}
    for batch in (9, 3):
        group = preps[:batch]
        slots = max(rt.plan_slots(p.input_ids.shape[0], 5) for p in group)
        rt.reset_cache(batch, slots)
        logits = [rt.prefill_batch(group, [pipe.encode_images(p) for p in group], list(range(batch)), slots).asnumpy()]
        pos = np.array([p.input_ids.shape[0] for p in group])
        before = kernels.decode_layer_calls if kernels is not None else 0
        for i in range(4):
            toks = [int(t) for t in np.argmax(logits[-1], -1)]
            logits.append(rt.decode_batch(toks, pos + i, [p.rope_delta for p in group], pipe.num_pos_axes).asnumpy())
        if kernels is not None:  # 9 rows: composed; 3 rows: the kernel, every layer, every step
            layers = len(rt.model.text_layers())
            assert kernels.decode_layer_calls - before == (0 if batch == 9 else 4 * layers)
        out[batch] = [step[:3] for step in logits]
    for i, (a, b) in enumerate(zip(out[9], out[3])):
        assert np.abs(a - b).max() <= 1e-4 * np.abs(b).max(), f"step {i}"
