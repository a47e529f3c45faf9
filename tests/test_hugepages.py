"""The weights on 2 MB pages (ms_ocr/convert/hugepages.py; the after-load collapse of models/loading.py): which
ranges are asked for, that the bytes stay the same, that this machine's kernel really backs them with huge pages as
they are loaded and after a collapse, and which buffers of a model are the decoder's."""

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


def test_collapse_keeps_the_bytes_and_backs_them_with_huge_pages():
    np.core.multiarray._set_madvise_hugepage(False)  # numpy would ask for huge pages itself
    try:
        buf = np.random.default_rng(0).integers(0, 255, 16 * MB, dtype=np.uint8)
    finally:
        np.core.multiarray._set_madvise_hugepage(True)
    before_bytes = buf.copy()
    lo, hi = H.interior(buf.ctypes.data, buf.nbytes)
    done = H.collapse([(buf.ctypes.data, buf.nbytes)])
    assert np.array_equal(buf, before_bytes)
    mode = H.thp_mode()
    if mode in ("always", "madvise"):
        # every whole huge page inside is either moved now (MADV_COLLAPSE) or left to khugepaged
        assert done["collapsed"] + done["advised"] == hi - lo and done["failed"] == 0
        assert hi - lo >= 14 * MB
        if done["collapsed"]:
            # the range is on huge pages now: its mappings hold at least that many (a mapping may be merged with a
            # neighbour holding more, e.g. pool memory an earlier load collapsed, or part of it was huge already)
            assert anon_huge_bytes(lo, hi) >= done["collapsed"]
    else:
        assert not H.enabled()


def test_collapse_skips_small_buffers():
    buf = np.zeros(3 * MB, np.uint8)
    assert H.collapse([(buf.ctypes.data, buf.nbytes)]) == {"collapsed": 0, "advised": 0, "failed": 0}


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
        want = sorted([(p.data_ptr(), 4 * MB) for p in (m.layers[0].params[0], m.layers[1].params[0])]
                      + [(head.data_ptr(), head.shape[0] * 4096)], key=lambda kv: -kv[1])
        assert got == want  # the 1-row norms are too small, the caches are state


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
