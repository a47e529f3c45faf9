"""CompileTimer: one compile per input-shape key, later calls go straight to the graph executor with the same
results as Cell.__call__ (and see parameters updated in place)."""

import gc

import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

from ms_ocr.compiler import _NO_FAST_PATH, CompileTimer


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


def _collections_seen(monkeypatch):
    """[(objects the collector walks, freeze count)] at each gc.collect() MindSpore's compile makes."""
    from mindspore.graph import api
    seen = []

    class _Gc:
        @staticmethod
        def collect(*args):
            seen.append((len(gc.get_objects()), gc.get_freeze_count()))
            return gc.collect(*args)
    monkeypatch.setattr(api, "gc", _Gc)
    return seen


@pytest.fixture
def unfrozen():
    """A process that has frozen nothing (tests/conftest.py freezes what collection made); frozen again after."""
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    yield
    if frozen:
        gc.freeze()


def test_compile_collects_only_objects_made_during_it(graph_mode, monkeypatch, unfrozen):
    """MindSpore's compile begins with a full gc.collect(); CompileTimer keeps the process's older objects out of
    its walk (gc.freeze) and hands them back to the collector afterwards."""
    seen = _collections_seen(monkeypatch)
    timer, cell = CompileTimer(), _Affine()
    keep = [[i] for i in range(50_000)]  # a loaded process: tens of thousands of tracked objects
    x, b = np.ones((2, 3), np.float32), np.zeros(3, np.float32)
    before = len(gc.get_objects())
    timer.call("step", cell, Tensor(x), Tensor(b))
    timer.call("step", cell, Tensor(np.ones((5, 3), np.float32)), Tensor(b))
    assert before > 50_000 and len(seen) >= 2
    assert all(walked < 10_000 and frozen > 50_000 for walked, frozen in seen), seen
    assert gc.get_freeze_count() == 0 and len(gc.get_objects()) >= before
    assert len(keep) == 50_000


def test_a_process_with_frozen_objects_of_its_own_keeps_them_frozen(graph_mode, monkeypatch, unfrozen):
    seen = _collections_seen(monkeypatch)
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        CompileTimer().call("step", _Affine(), Tensor(np.ones((2, 3), np.float32)), Tensor(np.zeros(3, np.float32)))
        # left as it was (objects that die leave the permanent generation, so a few fewer)
        assert seen and all(frozen - 1_000 < f <= frozen for f in [gc.get_freeze_count()] + [f for _, f in seen])
    finally:
        gc.unfreeze()


class _Scale(nn.Cell):
    def construct(self, x, w):
        return x * w


def test_graph_input_is_the_parameters_own_buffer_off_ascend(graph_mode, monkeypatch):
    """Layer graphs take weights and host-written KV caches as graph_input views: the graph reads the
    Parameter's current buffer (host writes through asnumpy() included), with no copy taken at the call."""
    from ms_ocr.nn.blocks import graph_input
    timer, cell = CompileTimer(), _Scale()
    p = Parameter(Tensor(np.array([1.0, 2.0, 3.0], np.float32)), name="p")
    q = Parameter(Tensor(np.array([-1.0, 0.5, 4.0], np.float32)), name="q")
    x = Tensor(np.ones(3, np.float32))
    view = graph_input(p)
    assert view.asnumpy().ctypes.data == p.asnumpy().ctypes.data
    np.testing.assert_array_equal(timer.call("s", cell, x, view).asnumpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(timer.call("s", cell, x, graph_input(q)).asnumpy(), [-1.0, 0.5, 4.0])
    p.asnumpy()[1] = 7.0  # a host write (store_kv) is what the next call reads
    np.testing.assert_array_equal(timer.call("s", cell, x, view).asnumpy(), [1.0, 7.0, 3.0])
    # one view per buffer: the same Tensor again until set_data replaces the buffer
    assert graph_input(p) is view
    p.set_data(Tensor(np.array([5.0, 6.0, 8.0], np.float32)))
    fresh = graph_input(p)
    assert fresh is not view and fresh.asnumpy().ctypes.data == p.asnumpy().ctypes.data
    np.testing.assert_array_equal(timer.call("s", cell, x, fresh).asnumpy(), [5.0, 6.0, 8.0])
    assert graph_input(p) is fresh
    device_tensor = object()  # Ascend (fused kernels): the device tensor, Parameter.value()
    assert graph_input(type("P", (), {"value": lambda self: device_tensor})(), fused=True) is device_tensor


def test_next_request_frees_graphs_the_last_requests_did_not_use(graph_mode):
    """Shapes of an evictable group unused for more than keep_requests requests lose their compiled graph
    (and its memory); they compile again, with the same results, if they come back. Other groups stay."""
    from mindspore.nn import cell as cell_module
    executor = cell_module._cell_graph_executor
    timer, cell, kept = CompileTimer(evictable=("vision",), keep_requests=1, idle_bytes=0), _Affine(), _Affine()
    w = np.array([2.0, -1.0, 0.5], np.float32)
    b = Tensor(np.zeros(3, np.float32))
    a, a_rows = Tensor(np.ones((2, 3), np.float32)), np.ones((2, 3), np.float32) * w
    timer.call("vision", cell, a, b)
    timer.call("decode", kept, a, b)
    phase_a = timer._phases[("vision", id(cell), ((2, 3), "Float32"), ((3,), "Float32"))][0]
    decode_phase = timer._phases[("decode", id(kept), ((2, 3), "Float32"), ((3,), "Float32"))][0]
    assert timer.next_request() == 0  # used by the request that just ended
    timer.call("vision", cell, Tensor(np.ones((5, 3), np.float32)), b)  # another shape, the next request
    assert timer.next_request() == 1  # (2, 3) was last used two requests ago
    assert not executor.has_compiled(phase_a) and phase_a not in cell.compile_cache
    assert executor.has_compiled(decode_phase) and len(timer._phases) == 2
    seconds = timer.seconds["vision"]
    np.testing.assert_array_equal(timer.call("vision", cell, a, b)[0].asnumpy(), a_rows)
    assert timer.seconds["vision"] > seconds  # compiled again, timed as compile
    assert timer.next_request() == 1  # (5, 3): unused by the last request and the one before
    assert timer.next_request() == 1 and len(timer._phases) == 1  # (2, 3) in turn; decode stays
    np.testing.assert_array_equal(timer.call("decode", kept, a, b)[0].asnumpy(), a_rows)


def test_idle_graphs_within_the_byte_budget_stay_compiled(graph_mode):
    """Small shapes that recur after others keep their graphs (most recently used first, up to idle_bytes of
    per-call inputs, Parameters not counted); beyond the budget the least recently used idle shape is freed.
    Regression: with three line sizes in turn, every size came back after two others and compiled again (the
    demo gate's 150 lines took 160 s through the CLI instead of 30 s)."""
    from mindspore.nn import cell as cell_module
    executor = cell_module._cell_graph_executor
    b = Tensor(np.zeros(3, np.float32))  # 12 bytes; each x below adds rows * 12
    x = {rows: Tensor(np.ones((rows, 3), np.float32)) for rows in (2, 3, 4)}
    timer, cell = CompileTimer(evictable=("vision",), keep_requests=1, idle_bytes=(3 + 4) * 12 + 2 * 12), _Affine()
    for rows in (2, 3, 4):
        timer.call("vision", cell, x[rows], b)
        timer.next_request()
    assert timer._used[("vision", id(cell), ((2, 3), "Float32"), ((3,), "Float32"))][2] == 2 * 12 + 12
    phases = {rows: timer._phases[("vision", id(cell), ((rows, 3), "Float32"), ((3,), "Float32"))][0]
              for rows in (2, 3, 4)}
    assert all(executor.has_compiled(p) for p in phases.values())  # 3 shapes, 2 idle: 36 + 48 bytes <= 108
    seconds = timer.seconds["vision"]
    for rows in (2, 3, 2, 4):  # recurring sizes: no compile
        timer.call("vision", cell, x[rows], b)
        timer.next_request()
    assert timer.seconds["vision"] == seconds
    big = Tensor(np.ones((6, 3), np.float32))  # 84 bytes with b
    timer.call("vision", cell, big, b)
    # idle now (unused by the last request): 4 (48 bytes), 2 (36), 3 (48), most recent first: 3 no longer fits
    assert timer.next_request() == 1
    assert not executor.has_compiled(phases[3]) and executor.has_compiled(phases[2])
    timer.call("vision", cell, x[4], b)
    assert timer.next_request() == 1  # idle: the 6-row shape (84) first, then 2 (36) no longer fits
    assert not executor.has_compiled(phases[2]) and executor.has_compiled(phases[4])
    np.testing.assert_array_equal(timer.call("vision", cell, x[3], b)[0].asnumpy(),
                                  np.ones((3, 3), np.float32) * np.array([2.0, -1.0, 0.5], np.float32))
    assert timer.seconds["vision"] > seconds  # a freed shape compiles again


def test_idle_prefill_graphs_stay_within_the_resident_budget(graph_mode, monkeypatch):
    """A group in resident_budgets counts each shape by the resident memory its first call added, not by its
    inputs: idle shapes stay, the most recently used first, while that sums to at most the group's budget;
    other evictable groups keep the input-byte rule. Regression: the server's prefill groups of 1-8 prompts
    came back after two others and compiled again (1.3-2.4 s a time, counted as compile)."""
    from mindspore.nn import cell as cell_module
    from ms_ocr import compiler
    executor = cell_module._cell_graph_executor
    readings = iter([0, 100, 100, 250, 250, 450, 450, 450])  # before/after each first call: 100, 150, 200, 0
    monkeypatch.setattr(compiler, "resident_bytes", lambda: next(readings))
    timer = CompileTimer(evictable=("prefill", "vision"), keep_requests=1, idle_bytes=0,
                         resident_budgets={"prefill": 300})
    cell, b = _Affine(), Tensor(np.zeros(3, np.float32))
    x = {rows: Tensor(np.ones((rows, 3), np.float32)) for rows in (1, 2, 3, 4)}

    def key(rows):
        return ("prefill", id(cell), ((rows, 3), "Float32"), ((3,), "Float32"))
    for rows in (1, 2, 3):
        timer.call("prefill", cell, x[rows], b)
        assert timer.next_request() == 0
    assert [timer._used[key(rows)][2] for rows in (1, 2, 3)] == [100, 150, 200]
    phases = {rows: timer._phases[key(rows)][0] for rows in (1, 2, 3)}
    timer.call("prefill", cell, x[1], b)  # compiled: no reading, its cost stays 100
    timer.call("vision", _Affine(), x[4], b)
    assert timer._used[key(1)][2] == 100
    assert timer.next_request() == 1  # idle: 3 (200) stays; 2 (150) would make 350 > 300: freed
    assert executor.has_compiled(phases[3]) and not executor.has_compiled(phases[2]) and key(2) not in timer._used
    assert timer.next_request() == 1  # idle: 1 (100) and 3 (200) stay (300); the vision shape (idle_bytes 0) goes
    assert executor.has_compiled(phases[1]) and executor.has_compiled(phases[3])
    assert not [k for k in timer._used if k[0] == "vision"]
    np.testing.assert_array_equal(timer.call("prefill", cell, x[2], b)[0].asnumpy(),
                                  np.ones((2, 3), np.float32) * np.array([2.0, -1.0, 0.5], np.float32))
    assert timer._used[key(2)][2] == 0  # compiled again, measured again (450 -> 450)


def test_resident_bytes_reads_this_process_rss():
    from ms_ocr.compiler import resident_bytes
    with open("/proc/self/status") as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
    assert abs(resident_bytes() - rss_kb * 1024) < 0.05 * rss_kb * 1024


def test_prefill_chunk_sizes_are_the_binary_parts_largest_first():
    from ms_ocr.runtime.core import chunk_sizes
    assert [chunk_sizes(n) for n in range(1, 9)] == [[1], [2], [2, 1], [4], [4, 1], [4, 2], [4, 2, 1], [8]]
    assert all(sum(chunk_sizes(n)) == n and len(set(chunk_sizes(n))) == len(chunk_sizes(n)) for n in range(1, 65))


def test_vision_blocks_are_longer_where_the_products_run_in_bf16(monkeypatch):
    """An image's ViT rows run in blocks of VISION_ATTENTION_CHUNK rows on the exact path and of
    VISION_ATTENTION_CHUNK_BF16 with the products in bf16 (oneDNN's bf16 GEMMs run faster on longer blocks; the exact
    path's blocks, and so its results, are unchanged); a chunk set on the encoder wins over both."""
    from types import SimpleNamespace

    from ms_ocr.runtime import vision as V

    class Layers:
        def vision_layers(self):
            return [SimpleNamespace(get_parameters=lambda: [])]

    enc = object.__new__(V.VisionEncoder)
    enc.model, enc.attention_chunk, enc.release_graphs, enc.release_layers = Layers(), None, False, False
    enc._load_layer, enc._unloaded = None, set()
    enc.embed_step = object()
    enc.call = lambda step, *args: Tensor(np.zeros((int(args[0].shape[0]), 4), np.float32))
    seen = []
    enc.layer = lambda layer, x, images: seen.append([(s, e) for _, _, blocks in images for s, e, _ in blocks]) or x
    item = SimpleNamespace(embed=[np.zeros((1300, 4), np.float32)])  # 1,300 patches
    enc.tensor = lambda a: Tensor(a)

    enc.plan = SimpleNamespace(bf16_products=False)
    enc.packed_tower([item])
    enc.plan = SimpleNamespace(bf16_products=True)
    enc.packed_tower([item])
    enc.attention_chunk = 300
    enc.packed_tower([item])
    assert V.VISION_ATTENTION_CHUNK == 512 and V.VISION_ATTENTION_CHUNK_BF16 == 1024
    assert seen == [[(0, 434), (434, 868), (868, 1302)],  # 3 blocks of 434 rows (2 padding rows)
                    [(0, 650), (650, 1300)],
                    [(0, 260), (260, 520), (520, 780), (780, 1040), (1040, 1300)]]
