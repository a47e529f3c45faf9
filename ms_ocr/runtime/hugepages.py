"""The decoder's weights on 2 MB pages (Linux transparent huge pages), for the decode step's reads.

A lone sequence's decode step streams every weight of the decoder and its head once per token. On 4 KB pages that
read takes a TLB miss every 4 KB, and in a virtual machine each miss walks two page tables; on 2 MB pages the
misses are 512 times fewer. Measured on an Intel Xeon (family 6 model 167, KVM guest, 2 threads): the PaddleOCR-VL
head's 211 MB product 9.3 ms on 4 KB pages against 7.5 ms on 2 MB pages, the whole `infer` decode step 41.7-44 ms
against 35.9 ms (docs/journal/native-kernels.md, "Where the decode step's time goes in the process").

The weights live in MindSpore's memory pool, filled at load on 4 KB pages. After the decoder's weights are loaded,
`collapse` asks Linux to move the 2 MB-aligned interior of each buffer to huge pages: MADV_COLLAPSE (Linux 6.1+; it
copies, ~0.6-1.3 s of CPU for PaddleOCR-VL's 721 MB there) on a background thread at the lowest priority; where the
kernel has no MADV_COLLAPSE, MADV_HUGEPAGE (khugepaged moves them in its own time); where transparent huge pages are
off ("never") or on a system without madvise, nothing. The values do not change (the same bytes at the same
addresses).

Who gets it: a process that loads the whole model at once (the server, the batch runner, the pipeline, the library)
and then decodes for a long time. Not the one-request CLI (`infer`, models/loading.staged_weights): its text weights
are loaded after the image is encoded, so the copy runs beside the prefill (+0.5-1.2 s there) and on one page with
1,024 tokens the wall came out even (74.8-85.1 s against 75.9-83.0, the same machine). MS_OCR_HUGE_PAGES=1 / 0 turns
it on / off for every process."""

import ctypes
import os
import threading

ENV_SWITCH = "MS_OCR_HUGE_PAGES"
HUGE = 2 << 20
MIN_BYTES = 2 * HUGE  # smaller buffers have little interior to move
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"

try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _LIBC.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
except (OSError, AttributeError):  # not Linux
    _LIBC = None


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
        if use_collapse and _LIBC.madvise(lo, hi - lo, MADV_COLLAPSE) == 0:
            done["collapsed"] += hi - lo
            continue
        use_collapse = use_collapse and ctypes.get_errno() != 22  # EINVAL: a kernel before 6.1, ask no more
        if _LIBC.madvise(lo, hi - lo, MADV_HUGEPAGE) == 0:
            done["advised"] += hi - lo
        else:
            done["failed"] += hi - lo
    return done


def decoder_buffers(model):
    """(ptr, nbytes) of the weights a decode step reads: every decoder layer's Parameters (not the KV caches) and
    the head (the embedding table when tied), largest first."""
    from ms_ocr.convert.loader import is_state
    params = [p for layer in model.text_layers() for p in layer.get_parameters() if not is_state(p.name)]
    params.append(model.model.embed_tokens.weight if model.tied else model.lm_head.weight)
    out = {}
    for p in params:
        if p.nbytes >= MIN_BYTES:
            out[p.data_ptr()] = p.nbytes
    return sorted(out.items(), key=lambda kv: -kv[1])


def collapse_in_background(model, default=True):
    """Start `collapse` of the decoder's weights on a daemon thread (None when turned off or unsupported): the
    thread, whose `result` holds collapse's counts when it ends. `default`: whether to, unless MS_OCR_HUGE_PAGES
    says."""
    if not enabled(default):
        return None
    try:
        buffers = decoder_buffers(model)
    except (AttributeError, RuntimeError, TypeError, ValueError):  # an optimisation: it never fails a load
        return None

    def run():
        try:  # the lowest priority: the copies take the CPU time prefill and decode leave
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError:
            pass
        thread.result = collapse(buffers)
    thread = threading.Thread(target=run, name="ms_ocr-hugepages", daemon=True)
    thread.result = None
    thread.start()
    return thread
