"""The decoder's weights on 2 MB pages (Linux transparent huge pages), for the decode step's reads.

A lone sequence's decode step streams every weight of the decoder and its head once per token. On 4 KB pages that
read takes a TLB miss every 4 KB, and in a virtual machine each miss walks two page tables; on 2 MB pages the
misses are 512 times fewer. Measured on an Intel Xeon (family 6 model 167, KVM guest, 2 threads): the PaddleOCR-VL
head's 211 MB product 9.3 ms on 4 KB pages against 7.5 ms on 2 MB pages; the whole decode step 38.1-38.8 ms against
33.9-34.5 ms (docs/journal/native-kernels.md).

The weights live in MindSpore's memory pool. `prepare_fresh` runs on each fresh pool buffer before the loader
writes a weight into it: the buffer's 2 MB-aligned interior is emptied (the pool may have used that memory before,
on 4 KB pages: the one-request CLI loads its text weights where the vision weights were) and marked MADV_HUGEPAGE,
then every page is mapped at once (MADV_POPULATE_WRITE), so the weights fault in on 2 MB pages with no copy, in
every process. `collapse` (MADV_COLLAPSE, Linux 6.1+; MADV_HUGEPAGE where the kernel lacks it, left to khugepaged)
moves what is still on 4 KB pages after load (buffers made another way); processes that load the whole model at
once run it on a background thread at the lowest priority (models/loading.py `collapse_in_background`): already
huge, nothing is copied. Where transparent huge pages are off ("never") or there is no madvise, nothing of this happens. The
values never change. MS_OCR_HUGE_PAGES=0 turns both off (4 KB pages); =1 runs the collapse in every process."""

import ctypes
import mmap
import os

ENV_SWITCH = "MS_OCR_HUGE_PAGES"
HUGE = 2 << 20
MIN_BYTES = 2 * HUGE  # smaller buffers have little interior to move
MADV_DONTNEED = 4
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
MADV_POPULATE_WRITE = 23  # Linux 5.14+; older kernels answer EINVAL and nothing happens
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
PAGE = mmap.PAGESIZE

try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _LIBC.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
except (OSError, AttributeError):  # not Linux
    _LIBC = None


def madvise(ptr, nbytes, advice):
    """madvise(2) over the pages [ptr, ptr + nbytes) touches (rounded out to 4 KB pages): 0 on success, -1 where it
    failed (errno: ctypes.get_errno()) or no libc has it."""
    if _LIBC is None:
        return -1
    lo = ptr - ptr % PAGE
    hi = -(-(ptr + nbytes) // PAGE) * PAGE
    return _LIBC.madvise(lo, hi - lo, advice)


def prepare_fresh(ptr, nbytes):
    """Before a fresh buffer of the pool is first written (the loader's weights): its 2 MB-aligned interior emptied
    (MADV_DONTNEED: the pool may have used that memory before, on 4 KB pages; the bytes are about to be
    overwritten) and marked MADV_HUGEPAGE, so that the writes fault 2 MB pages in directly: no copy later, where
    `collapse` copies. Then every page is mapped at once (MADV_POPULATE_WRITE: one madvise instead of a fault per
    page inside the copy; a fault is costly in a virtual machine). MS_OCR_HUGE_PAGES=0: 4 KB pages, mapped at once."""
    if nbytes < (1 << 20):
        return
    span = interior(ptr, nbytes) if nbytes >= MIN_BYTES and enabled() else None
    if span is not None:
        lo, hi = span
        if madvise(lo, hi - lo, MADV_DONTNEED) == 0:
            madvise(lo, hi - lo, MADV_HUGEPAGE)
    madvise(ptr, nbytes, MADV_POPULATE_WRITE)


def interior(ptr, nbytes):
    """The 2 MB-aligned range [lo, hi) inside [ptr, ptr + nbytes), or None when it holds no whole huge page."""
    lo = -(-ptr // HUGE) * HUGE
    hi = (ptr + nbytes) // HUGE * HUGE
    return (lo, hi) if hi > lo else None


def thp_mode(path=THP_ENABLED):
    """The kernel's transparent huge page mode ("always", "madvise", "never"), or None where it has none."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def enabled(default=True):
    """Whether to move them: MS_OCR_HUGE_PAGES=1 / 0 says, else `default`; never without THP or madvise."""
    wanted = {"1": True, "0": False}.get(os.environ.get(ENV_SWITCH, ""), default)
    return wanted and _LIBC is not None and thp_mode() in ("always", "madvise")


def collapse(buffers, min_bytes=MIN_BYTES):
    """Move each (ptr, nbytes) buffer's 2 MB-aligned interior to huge pages: MADV_COLLAPSE, else MADV_HUGEPAGE.
    Returns {"collapsed": bytes moved now, "advised": bytes left to khugepaged, "failed": bytes neither took}."""
    done = {"collapsed": 0, "advised": 0, "failed": 0}
    use_collapse = True
    for ptr, nbytes in buffers:
        span = interior(ptr, nbytes) if nbytes >= min_bytes else None
        if span is None:
            continue
        lo, hi = span
        if use_collapse and madvise(lo, hi - lo, MADV_COLLAPSE) == 0:
            done["collapsed"] += hi - lo
            continue
        use_collapse = use_collapse and ctypes.get_errno() != 22  # EINVAL: a kernel before 6.1, ask no more
        if madvise(lo, hi - lo, MADV_HUGEPAGE) == 0:
            done["advised"] += hi - lo
        else:
            done["failed"] += hi - lo
    return done
