"""The decoder's weights and KV caches on 2 MB pages (Linux transparent huge pages), for the decode step's reads.

A lone sequence's decode step streams every weight of the decoder and its head once per token. On 4 KB pages that
read takes a TLB miss every 4 KB, and in a virtual machine each miss walks two page tables; on 2 MB pages the
misses are 512 times fewer. Measured on an Intel Xeon (family 6 model 167, KVM guest, 2 threads): the PaddleOCR-VL
head's 211 MB product 9.3 ms on 4 KB pages against 7.5 ms on 2 MB pages; the whole decode step 38.1-38.8 ms against
33.9-34.5 ms (docs/journal/native-kernels.md).

The weights live in MindSpore's memory pool. `prepare_fresh` runs on each fresh pool buffer before the loader
writes a weight into it: the buffer's 2 MB-aligned interior is emptied (the pool may have used that memory before,
on 4 KB pages: the one-request CLI loads its text weights where the vision weights were) and marked MADV_HUGEPAGE,
then every page is mapped at once (MADV_POPULATE_WRITE), so the weights fault in on 2 MB pages with no copy, in
every process. Only a buffer's whole 2 MB pages can fault in that way: its edges share their 2 MB regions with the
neighbouring buffers and stay on 4 KB pages. `collapse` (MADV_COLLAPSE, Linux 6.1+; MADV_HUGEPAGE where the kernel
lacks it, left to khugepaged) moves every region a decoder weight touches after the load, the edges and buffers made
another way (regions already huge are skipped by the kernel); processes that load the whole model at once run it on a
background thread at the lowest priority (models/loading.py `collapse_in_background`). The one-request CLI does not:
for PaddleOCR-VL the edges are 41 % of the layers' bytes, and moving them took 0.55-0.58 s for 0.5-0.7 ms a token
(30.8 -> 30.3 ms; Xeon model 167), which repays itself only past ~900 tokens. Where transparent huge pages are off
("never") or there is no madvise, nothing of this happens. The values never change. MS_OCR_HUGE_PAGES=0 turns both off
(4 KB pages); =1 runs the collapse in every process.

The host-written KV caches go the same way at each reset (`zeroed_on_huge_pages`, runtime/kvcache.py): the pool
puts them side by side, so their run's interior covers nearly all of them."""

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
    page inside the copy; a fault is costly in a virtual machine). MS_OCR_HUGE_PAGES=0: 4 KB pages, mapped at once.
    Returns the interior (lo, hi) it emptied, or None."""
    if nbytes < (1 << 20):
        return None
    span = interior(ptr, nbytes) if nbytes >= MIN_BYTES and enabled() else None
    if span is not None:
        lo, hi = span
        if madvise(lo, hi - lo, MADV_DONTNEED) == 0:
            madvise(lo, hi - lo, MADV_HUGEPAGE)
        else:
            span = None
    madvise(ptr, nbytes, MADV_POPULATE_WRITE)
    return span


def spans(buffers):
    """The (ptr, nbytes) buffers joined where one ends exactly where the next begins, in address order: the pool
    puts the KV caches it allocates one after another side by side, so their run has one 2 MB-aligned interior
    instead of each its own (a 2.1 MB cache, PaddleOCR-VL's keys of one layer at 4,096 slots in bf16, has none)."""
    out = []
    for ptr, nbytes in sorted(b for b in buffers if b[1] > 0):
        if out and out[-1][0] + out[-1][1] == ptr:
            out[-1] = (out[-1][0], out[-1][1] + nbytes)
        else:
            out.append((ptr, nbytes))
    return out


def zeroed_on_huge_pages(buffers):
    """Fresh buffers every byte of which is to read 0 (the KV caches at a reset) moved to 2 MB pages where they are
    (`spans` of them; prepare_fresh on each), then the interiors prepare_fresh emptied written with zeros: the bytes
    read 0 whatever memory the pool hands out. The decode step streams the caches as it streams the weights:
    DeepSeek-OCR-2's DecodeLayer read a 4,150-slot bf16 cache at 12.5-14.4 GB/s on 4 KB pages, 17.9-18.4 on 2 MB
    (Xeon model 167, 2 threads). Returns the bytes moved."""
    moved = 0
    for ptr, nbytes in spans(buffers):
        span = prepare_fresh(ptr, nbytes)
        if span is not None:
            ctypes.memset(span[0], 0, span[1] - span[0])
            moved += span[1] - span[0]
    return moved


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


def regions(buffers):
    """The 2 MB-aligned regions [lo, lo + 2 MB) that hold any byte of the (ptr, nbytes) buffers, in order, each once:
    the pages that must be huge for every byte of them to be. A buffer's edges share their regions with its
    neighbours in the pool (a weight's first and last bytes are rarely 2 MB-aligned): prepare_fresh leaves those
    on 4 KB pages, 41 % of PaddleOCR-VL's layer weights' bytes (measured in /proc/kpageflags)."""
    out = set()
    for ptr, nbytes in buffers:
        if nbytes > 0:
            out.update(range(ptr // HUGE * HUGE, ptr + nbytes, HUGE))
    return sorted(out)


def collapse(buffers):
    """Move every byte of the (ptr, nbytes) buffers to huge pages, region by region (`regions`; their neighbours'
    bytes in those regions too): MADV_COLLAPSE (regions already huge cost a system call), else MADV_HUGEPAGE, left
    to khugepaged. The bytes never change. Returns {"collapsed": bytes moved or found huge, "advised": bytes left to
    khugepaged, "failed": bytes neither took (a region reaching past the mapping)}."""
    done = {"collapsed": 0, "advised": 0, "failed": 0}
    use_collapse = True
    for lo in regions(buffers):
        if use_collapse and madvise(lo, HUGE, MADV_COLLAPSE) == 0:
            done["collapsed"] += HUGE
            continue
        use_collapse = use_collapse and ctypes.get_errno() != 22  # EINVAL: a kernel before 6.1, ask no more
        if madvise(lo, HUGE, MADV_HUGEPAGE) == 0:
            done["advised"] += HUGE
        else:
            done["failed"] += HUGE
    return done
