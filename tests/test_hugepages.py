"""The weights on 2 MB pages (ms_ocr/convert/hugepages.py; the after-load collapse of models/loading.py): which
ranges are asked for, that the bytes stay the same, that this machine's kernel really backs them with huge pages as
they are loaded and after a collapse, and which buffers of a model are the decoder's."""

import ctypes
import mmap

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor

from ms_ocr.convert import hugepages as H
from ms_ocr.models.loading import collapse_in_background, decoder_buffers

MB = 1 << 20


def anon_huge_bytes(lo, hi):
    """AnonHugePages of the mappings overlapping [lo, hi) (/proc/self/smaps): the buffer's own, whatever the rest
    of the process (other tests' arrays) does meanwhile."""
    total, overlaps = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:  # a mapping's first line: "start-end perms ..."
                start, end = (int(x, 16) for x in head.split("-"))
                overlaps = start < hi and lo < end
            elif overlaps and line.startswith("AnonHugePages:"):
                total += int(line.split()[1]) * 1024
    return total


def test_interior_is_the_whole_huge_pages_inside():
    assert H.interior(0, 4 * MB) == (0, 4 * MB)
    assert H.interior(1, 4 * MB) == (2 * MB, 4 * MB)
    assert H.interior(2 * MB - 1, 2 * MB + 2) == (2 * MB, 4 * MB)
    assert H.interior(3 * MB, 2 * MB) is None  # [3, 5) MB holds no whole huge page
    assert H.interior(2 * MB, 2 * MB - 1) is None


def test_thp_mode_reads_the_bracketed_choice(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert H.thp_mode(str(f)) == "madvise"
    f.write_text("[always] madvise never\n")
    assert H.thp_mode(str(f)) == "always"
    assert H.thp_mode(str(tmp_path / "missing")) is None


def test_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv(H.ENV_SWITCH, "0")
    assert not H.enabled()
    assert collapse_in_background(object()) is None  # nothing of the model is touched


def test_regions_hold_every_byte_of_the_buffers_once():
    assert H.regions([(0, 4 * MB)]) == [0, 2 * MB]
    assert H.regions([(2 * MB + 100, 3 * MB)]) == [2 * MB, 4 * MB]  # [2 MB + 100, 5 MB + 100): two regions
    assert H.regions([(3 * MB, 2 * MB)]) == [2 * MB, 4 * MB]  # no whole huge page inside, two regions touched
    # neighbours sharing a region (a weight's edge and the next weight's start), a tiny buffer, an empty one
    assert H.regions([(5 * MB, 3 * MB), (1 * MB, 4 * MB), (9 * MB, 16), (20 * MB, 0)]) == [0, 2 * MB, 4 * MB, 6 * MB,
                                                                                         8 * MB]


def _private_pages(nbytes):
    """An anonymous private mapping of `nbytes` written on 4 KB pages (transparent huge pages only on madvise here)
    and its address: the decoder's weights in the pool before a collapse."""
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.write(bytes(range(251)) * (nbytes // 251) + bytes(nbytes % 251))
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


def test_collapse_moves_every_region_a_buffer_touches_and_keeps_the_bytes():
    """A buffer's edges (2 MB regions it shares with its neighbours) are collapsed with it, not just its interior:
    the loader leaves exactly those on 4 KB pages (41 % of PaddleOCR-VL's layer bytes)."""
    assert H.thp_mode() == "madvise"
    m, base = _private_pages(12 * MB)
    a = -(-base // (2 * MB)) * (2 * MB)  # the first 2 MB boundary inside
    before = bytes(m)
    assert anon_huge_bytes(a, a + 6 * MB) == 0  # written on 4 KB pages
    buf = (a + 3 * MB // 2, 3 * MB)  # [a + 1.5 MB, a + 4.5 MB): no whole huge page of its own, three regions
    assert H.interior(*buf) == (a + 2 * MB, a + 4 * MB)
    done = H.collapse([buf])
    assert done == {"collapsed": 6 * MB, "advised": 0, "failed": 0}  # this kernel (6.1+) has MADV_COLLAPSE
    assert bytes(m) == before
    assert anon_huge_bytes(a, a + 6 * MB) >= 6 * MB
    again = H.collapse([buf])  # already huge: the kernel finds them so
    assert again == done and bytes(m) == before
    m.close()


class _Layer:
    def __init__(self, params):
        self.params = params

    def get_parameters(self):
        return iter(self.params)


class _Model:
    def __init__(self, tied):
        def param(name, rows, dtype=ms.float32):
            return Parameter(Tensor(np.zeros((rows, 1024), np.float32), dtype), name=name)
        self.layers = [_Layer([param(f"l{i}.q", 1024), param(f"l{i}.norm", 1),
                               param(f"l{i}.self_attn.k_cache", 2048)]) for i in range(2)]
        self.tied = tied
        self.model = type("Inner", (), {})()
        self.model.embed_tokens = type("Embed", (), {"weight": param("embed", 3000)})()
        self.lm_head = type("Head", (), {"weight": param("head", 2000)})()

    def text_layers(self):
        return self.layers


def test_decoder_buffers_are_the_layers_and_the_head_not_the_caches():
    for tied in (True, False):
        m = _Model(tied)
        head = m.model.embed_tokens.weight if tied else m.lm_head.weight
        got = decoder_buffers(m)
        layers = [(p.data_ptr(), p.shape[0] * 4096) for layer in m.layers for p in layer.params[:2]]
        want = sorted(layers + [(head.data_ptr(), head.shape[0] * 4096)], key=lambda kv: -kv[1])
        assert got == want  # matrices and norms (every byte a step reads), not the caches (state)


def test_a_model_it_cannot_read_is_left_as_it_is(monkeypatch):
    monkeypatch.setenv(H.ENV_SWITCH, "1")
    if H.enabled():  # a model without text_layers: no thread, no error (the load goes on)
        assert collapse_in_background(object()) is None
    else:
        assert H.thp_mode() not in ("always", "madvise")


def _touched(nbytes):
    """A buffer of `nbytes` on 4 KB pages, every page written (as pool memory used before)."""
    np.core.multiarray._set_madvise_hugepage(False)  # numpy would ask for huge pages itself
    try:
        buf = np.full(nbytes, 7, np.uint8)
    finally:
        np.core.multiarray._set_madvise_hugepage(True)
    return buf


def test_a_fresh_buffer_faults_in_on_huge_pages(monkeypatch):
    """prepare_fresh (the loader's weights, before they are written): the interior of memory already on 4 KB pages
    is emptied and faults in again on 2 MB pages as it is written; switched off, the pages stay as they were
    (mapped, contents untouched). This machine's kernel has transparent huge pages on madvise."""
    assert H.thp_mode() in ("always", "madvise")
    monkeypatch.setenv(H.ENV_SWITCH, "1")
    buf = _touched(16 * MB)
    lo, hi = H.interior(buf.ctypes.data, buf.nbytes)
    H.prepare_fresh(buf.ctypes.data, buf.nbytes)
    off = lo - buf.ctypes.data
    assert not buf[off:off + (hi - lo)].any() and buf[:off].all()  # the interior emptied, the edges kept
    buf[:] = np.arange(buf.size, dtype=np.uint8)
    assert np.array_equal(buf, np.arange(buf.size, dtype=np.uint8))
    assert anon_huge_bytes(lo, hi) >= hi - lo >= 14 * MB
    monkeypatch.setenv(H.ENV_SWITCH, "0")
    buf = _touched(16 * MB)
    H.prepare_fresh(buf.ctypes.data, buf.nbytes)
    assert buf.all()


def test_the_loaders_buffers_are_on_huge_pages():
    from ms_ocr.convert.loader import pool_array
    t, view = pool_array((4 * MB,), ms.float32, np.float32)  # 16 MB
    view[:] = np.arange(view.size, dtype=np.float32)
    lo, hi = H.interior(t.data_ptr(), view.nbytes)
    assert anon_huge_bytes(lo, hi) >= hi - lo >= 14 * MB
    assert np.array_equal(t.asnumpy(), np.arange(view.size, dtype=np.float32))


def test_spans_join_the_buffers_side_by_side():
    assert H.spans([(10 * MB, 2 * MB), (0, 4 * MB), (4 * MB, 3 * MB), (7 * MB, 0), (7 * MB, MB)]) == [
        (0, 8 * MB), (10 * MB, 2 * MB)]  # [0, 4) + [4, 7) + [7, 8) one run; [8, 10) belongs to none
    assert H.spans([(MB, MB), (MB + MB + 1, MB)]) == [(MB, MB), (2 * MB + 1, MB)]  # a byte apart: two
    assert H.spans([]) == []


def test_zeroed_buffers_side_by_side_go_onto_huge_pages_as_one_run(monkeypatch):
    """zeroed_on_huge_pages (the KV caches at a reset): buffers side by side are one run whose 2 MB-aligned interior
    is moved (emptied, written with zeros, on huge pages), the run's edges and every byte outside it untouched;
    switched off, nothing moves."""
    assert H.thp_mode() in ("always", "madvise")
    monkeypatch.setenv(H.ENV_SWITCH, "1")
    buf = _touched(24 * MB)
    base = buf.ctypes.data
    a = -(-(base + MB) // (2 * MB)) * (2 * MB) + MB  # 1 MB past a 2 MB boundary, >= 1 MB into buf
    parts = [(a, 3 * MB // 2), (a + 3 * MB // 2, 3 * MB // 2), (a + 3 * MB, 3 * MB), (a + 6 * MB, 13 * MB // 2)]
    assert all(H.interior(*p) is None for p in parts[:2])  # alone, the first two would have no huge page
    lo, hi = H.interior(a, 25 * MB // 2)
    assert (lo, hi) == (a + MB, a + 11 * MB)
    assert H.zeroed_on_huge_pages(parts) == hi - lo
    off = lo - base
    assert not buf[off:off + (hi - lo)].any()
    assert buf[:off].all() and buf[off + (hi - lo):].all()  # the run's edges and the rest as they were
    assert anon_huge_bytes(lo, hi) >= hi - lo
    monkeypatch.setenv(H.ENV_SWITCH, "0")
    buf = _touched(24 * MB)
    assert H.zeroed_on_huge_pages([(buf.ctypes.data, buf.nbytes)]) == 0 and buf.all()


def test_the_kv_caches_are_on_huge_pages_and_zero_after_a_reset(monkeypatch):
    """The host-written caches at a reset (runtime/kvcache.py): every layer's keys and values zero, and every whole
    2 MB page of their run on a huge page. On 4 KB pages a decode step read them at 12.5-14.4 GB/s instead of
    17.9-18.4 (docs/native-kernels.md)."""
    from ms_ocr.nn.attention import KVCacheAttention
    from ms_ocr.runtime.kvcache import HostKVCache
    monkeypatch.delenv(H.ENV_SWITCH, raising=False)

    class Layer:
        def __init__(self):
            self.self_attn = KVCacheAttention(64, 2, 2, 128)

    class Model:
        layers = [Layer() for _ in range(3)]

        def text_layers(self):
            return self.layers

        def allocate_cache(self, batch, slots, dtype, flat=True):
            for layer in self.layers:
                layer.self_attn.allocate_cache(batch, slots, dtype, flat)

    cache = HostKVCache(Model(), ms.float32)
    for slots in (4096, 6144):  # 4 and 6 MB a cache, 24 and 36 MB in all
        cache.reset(1, slots)
        bufs = [(c.data_ptr(), c.nbytes) for layer in Model.layers
                for c in (layer.self_attn.k_cache, layer.self_attn.v_cache)]
        assert sum(n for _, n in bufs) == 6 * slots * 2 * 128 * 4
        runs = H.spans(bufs)
        inside = [H.interior(*r) for r in runs]
        huge = sum(anon_huge_bytes(lo, hi) for lo, hi in inside)
        assert huge >= sum(hi - lo for lo, hi in inside) >= sum(n for _, n in bufs) - len(runs) * 4 * MB > 0
        for k, v in cache.views:
            assert k.shape == v.shape == (1, 2, slots, 128) and not k.any() and not v.any()
            k[...] = 1  # the next reset must zero what this one's sequence wrote
            v[...] = 1
