"""The decode kernels' thread team (SpinTeam in ms_ocr/ops/native/team.h): DecodeLayer and MatMulT run on it,
and a call made while another thread's call holds the team runs alone on its caller. Here several Python threads
call the kernels at once through ctypes (which releases the GIL), many times, and every result is checked."""

import ctypes
import threading

import numpy as np

from ms_ocr.ops import native
from tests.helpers.native import needs_compiler
from tests.ops import test_decode_layer

_C_DTYPES = {np.dtype(np.float32): b"float32", np.dtype(np.uint16): b"bfloat16"}


def _call(lib, kernel, inputs, out_shapes):
    """kernel(inputs) through its MindSpore Custom-op entry point; returns the outputs (fp32)."""
    outs = [np.zeros(s, np.float32) for s in out_shapes]
    arrays = [np.ascontiguousarray(a) for a in inputs] + outs
    n = len(arrays)
    params = (ctypes.c_void_p * n)(*[a.ctypes.data for a in arrays])
    ndims = (ctypes.c_int * n)(*[a.ndim for a in arrays])
    shapes = [(ctypes.c_int64 * max(a.ndim, 1))(*a.shape) for a in arrays]
    shape_ptrs = (ctypes.POINTER(ctypes.c_int64) * n)(*[ctypes.cast(s, ctypes.POINTER(ctypes.c_int64))
                                                         for s in shapes])
    dtypes = (ctypes.c_char_p * n)(*[_C_DTYPES[a.dtype] for a in arrays])
    fn = getattr(lib, kernel)
    fn.restype = ctypes.c_int
    assert fn(n, params, ndims, shape_ptrs, dtypes, None, None) == 0
    return outs


@needs_compiler
def test_concurrent_callers_get_their_own_results():
    kernels = native.NativeKernels(native.build())
    kernels.set_threads(2)
    lib = kernels.lib
    rng = np.random.default_rng(0)
    # a DecodeLayer case with two 4-head blocks per kv group and head_dim 128, and a head-sized MatMulT
    *tensors, weights = test_decode_layer.make_case(rng, *test_decode_layer.CASES[4])
    layer_in = [*tensors, *weights, np.array([1e-5], np.float32)]
    b, _, hidden = tensors[0].shape
    hkv, d = tensors[4].shape[1], tensors[4].shape[3]
    layer_ref = test_decode_layer.reference(*tensors, weights, 1e-5)
    layer_shapes = [(b, 1, hidden), (b, hkv, 1, d), (b, hkv, 1, d)]
    xs = [rng.standard_normal((m, 96)).astype(np.float32) for m in (1, 3)]
    w = rng.standard_normal((2000, 96)).astype(np.float32)
    errors = []

    def worker(index):
        try:
            for i in range(60):
                if (i + index) % 2:
                    outs = _call(lib, "DecodeLayer", layer_in, layer_shapes)
                    for got, want in zip(outs, layer_ref):
                        assert np.abs(got - want).max() <= 2e-5 * max(1.0, np.abs(want).max())
                else:
                    x = xs[index % 2]
                    (y,) = _call(lib, "MatMulT", [x, w], [(x.shape[0], w.shape[0])])
                    want = x.astype(np.float64) @ w.T.astype(np.float64)
                    assert np.abs(y - want).max() <= 1e-4 * np.abs(want).max()
        except AssertionError as e:  # reported by the main thread
            errors.append((index, e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a kernel call did not return"
    assert not errors, errors
    assert kernels.decode_layer_calls >= 90 and kernels.matmul_t_calls >= 90
