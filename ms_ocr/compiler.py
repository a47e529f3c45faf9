"""Graph compilation, owned in one place: CompileTimer compiles each step once per input signature (timed apart
from run time, later calls straight to the graph executor) and frees idle shapes; the compiled graphs kept on disk
across processes are compile_cache.py's (CompileCache, consulted around each compile).

It leans on MindSpore internals (the graph executor's phases); where this MindSpore lacks them it steps aside and
everything is compiled the documented way.
"""

import contextlib
import gc
import hashlib
import os
import time

import numpy as np
import mindspore as ms
from mindspore import Tensor
from mindspore.nn import cell as _cell_module

from ms_ocr.compile_cache import CompileCache

# Vision/prefill graphs of shapes that this many consecutive requests did not use are freed (each kept shape
# holds its compiled graphs and activation memory). A freed shape that comes back compiles again.
KEEP_GRAPHS_REQUESTS = 2
# ... except that idle graphs whose per-call inputs (Parameters not counted: they are resident anyway) sum to
# at most this many bytes stay compiled, the most recently used first. A page's graphs exceed it on their own
# (PaddleOCR-VL at ~1,000 patches: the block step's keys and values alone are ~9 MB), so pages are freed as
# before; small images of a few recurring sizes - line crops, the demo model - no longer recompile whenever a
# size comes back after two others.
IDLE_GRAPH_BYTES = 8 << 20
# Prefill graphs are counted by what they hold instead: the resident memory that a shape's first call added
# (activation buffers kept with the graph, whatever the weights), and idle ones stay, the most recently used first,
# while that sums to at most this. The runtime prefills a group in power-of-two chunks (runtime/core.py
# prefill_batch), so the server's groups of 1-8 crops make four shapes a prompt bucket: they stay, where "two
# requests" recompiled a size that came back after two
# others. Pages' buckets are larger and are freed as before.
IDLE_PREFILL_RESIDENT = 1 << 30

class CompileTimer:
    """Compiles a step separately the first time it sees an input-shape key, so run time excludes it, and runs
    the compiled graph again without Cell.__call__'s per-call bookkeeping.

    Cell.__call__ re-enters Cell.compile on every call, which re-assigns compile_phase on every sub-cell of the
    step; for a decode step that owns the whole model that walk is ~10,000 setattr calls a token (cProfile,
    PaddleOCR-VL), a measurable share of the step. Once a shape key is compiled, call() remembers the executor phase
    MindSpore gave it and hands later calls straight to the graph executor, as compile_and_run does after its
    compile. If this MindSpore lacks those internals, every call goes through Cell.__call__ as before.

    Every compiled shape keeps its graph and its activation memory until it is freed. Groups named in
    `evictable` are freed by next_request() once `keep_requests` requests have not used them, except the most
    recently used of them while their per-call inputs sum to at most `idle_bytes` - or, for a group named in
    `resident_budgets`, while the resident memory their first calls added sums to at most its budget (what that
    saves over many page sizes: docs/journal/architecture.md, "Compile once")."""

    def __init__(self, evictable=(), keep_requests=KEEP_GRAPHS_REQUESTS, idle_bytes=IDLE_GRAPH_BYTES,
                 resident_budgets=None):
        self.seconds = {}
        self._phases = {}
        self.evictable = frozenset(evictable)
        self.keep_requests = keep_requests
        self.idle_bytes = idle_bytes
        self.resident_budgets = dict(resident_budgets or {})  # group -> bytes its idle graphs may hold
        self.requests = 0
        self._used = {}  # key of an evictable group -> (request count at its last call, cell, bytes it costs)

    def call(self, name, cell, *args):
        key = (name, id(cell)) + tuple((tuple(a.shape), str(a.dtype)) for a in args)
        resident = name in self.resident_budgets
        if name in self.evictable:
            used = self._used.get(key)
            self._used[key] = (self.requests, cell, used[2] if used else 0 if resident else _input_bytes(args))
        known = self._phases.get(key)
        if known is _NO_FAST_PATH:
            return cell(*args)
        executor = getattr(_cell_module, "_cell_graph_executor", None)
        if known is None or not executor.has_compiled(known[0]):  # first call of this shape (or a freed graph)
            cache = CompileCache.active
            if cache is not None:
                cache.safely(cache.before_compile, graph_key(name, cell, args))
            before = resident_bytes() if resident else 0
            with collector_skips_older_objects():
                if key not in self._phases:
                    t0 = time.perf_counter()
                    cell.compile(*args)
                    self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
                out = cell(*args)  # runs the documented way (compiles a freed graph again)
            if cache is not None:
                cache.safely(cache.after_compile)
            self._phases[key] = _compiled_phase(cell, executor)
            if resident and key in self._used:
                self._used[key] = self._used[key][:2] + (max(0, resident_bytes() - before),)
            return out
        phase, mutable_flags, sequence_modified = known
        run_args = executor._graph_executor.get_args_for_run(cell, args, {}, list(mutable_flags),
                                                             list(sequence_modified), False, False)
        executor._graph_executor.set_jit_config(getattr(cell, "jit_config_dict", None)
                                                 or _cell_module._DEFAULT_JIT_CONFIG)
        return executor._exec_pip(cell, *run_args, phase=phase)

    def next_request(self):
        """Count a request and free the graphs of evictable groups that the last `keep_requests` requests did
        not use: their compiled code and activation memory (MindSpore keeps both for the life of the process
        otherwise), except the most recently used of them while their input bytes sum to at most `idle_bytes`.
        A freed shape compiles again if it comes back. Returns how many graphs were freed."""
        self.requests += 1
        executor = getattr(_cell_module, "_cell_graph_executor", None)
        if executor is None or not hasattr(executor, "del_net_res"):
            return 0
        idle = [(key, last, cell, nbytes) for key, (last, cell, nbytes) in self._used.items()
                if self.requests - last > self.keep_requests]
        idle.sort(key=lambda item: -item[1])  # most recently used first (stable: call order among equals)
        freed, kept = 0, {}
        for key, _, cell, nbytes in idle:
            group = key[0]
            if kept.get(group, 0) + nbytes <= self.resident_budgets.get(group, self.idle_bytes):
                kept[group] = kept.get(group, 0) + nbytes
            else:
                freed += self._free(executor, key, cell)
        return freed

    def free_group(self, name):
        """Free every graph of evictable group `name` now, whatever the requests (see next_request). Returns how
        many graphs were freed."""
        executor = getattr(_cell_module, "_cell_graph_executor", None)
        if executor is None or not hasattr(executor, "del_net_res"):
            return 0
        return sum(self._free(executor, key, cell) for key, (_, cell, _) in list(self._used.items()) if key[0] == name)

    def free_cell(self, cell):
        """Free every compiled shape of one step (of an evictable group) now. Returns how many graphs were freed."""
        executor = getattr(_cell_module, "_cell_graph_executor", None)
        if executor is None or not hasattr(executor, "del_net_res"):
            return 0
        return sum(self._free(executor, key, c) for key, (_, c, _) in list(self._used.items()) if c is cell)

    def _free(self, executor, key, cell):
        del self._used[key]
        known = self._phases.get(key)
        if not isinstance(known, tuple):  # a shape that runs through Cell.__call__ (_NO_FAST_PATH)
            return 0
        executor.del_net_res(cell, {known[0]})
        cell.compile_cache.discard(known[0])
        del self._phases[key]
        return 1


_NO_FAST_PATH = "no fast path"


@contextlib.contextmanager
def collector_skips_older_objects():
    """Every graph compile starts with a full gc.collect() (MindSpore's graph/api.py), which walks every object of
    the process, the longer the more it holds (a test worker, beside torch and transformers, most), for each of
    the ~25-60 graphs of a run (docs/journal/benchmarks.md, "Compiling without walking the process"). Inside this
    block the objects
    that exist when it starts are kept out of the collector's sight (gc.freeze), and are put back into its oldest
    generation at the end (gc.unfreeze), to be collected as before. A process that has frozen objects of its own
    (gc.get_freeze_count() > 0) is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def resident_bytes():
    """This process's resident memory now, in bytes (/proc/self/statm; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _input_bytes(args):
    """Bytes of a graph call's per-call inputs: every Tensor argument but Parameters (resident weights)."""
    return sum(int(np.prod(a.shape)) * a.itemsize for a in args
               if isinstance(a, Tensor) and not isinstance(a, ms.Parameter))


def _compiled_phase(cell, executor):
    """(executor phase, argument flags) of the graph `cell` just ran, or _NO_FAST_PATH when this MindSpore's
    internals differ or the cell has mutable/dynamic-shape arguments (those need Cell.__call__'s handling)."""
    phase = getattr(cell, "current_phase", None)
    usable = (isinstance(phase, str) and hasattr(_cell_module, "_DEFAULT_JIT_CONFIG")
              and all(hasattr(executor, a) for a in ("_exec_pip", "_graph_executor", "has_compiled"))
              and hasattr(getattr(executor, "_graph_executor", None), "get_args_for_run")
              and not any(getattr(cell, "_has_mutable_args_list", None) or ())
              and getattr(cell, "_dynamic_shape_inputs", None) is None)
    if not (usable and executor.has_compiled(phase)):
        return _NO_FAST_PATH
    return phase, tuple(cell._has_mutable_args_list or ()), tuple(getattr(cell, "sequence_modified", None) or ())


def graph_key(name, cell, args):
    """What identifies a compiled graph across processes (id(cell) does not): the step's class, the names, shapes
    and dtypes of the Parameters it binds (a per-layer Cell's graph reads that layer's weights), and every input's
    shape and dtype.
    The model's config, dtypes and kernel routes are the cache folder's key (CompileCache)."""
    params = hashlib.sha1("\0".join(f"{p.name}:{tuple(p.shape)}:{p.dtype}" for p in cell.get_parameters())
                          .encode()).hexdigest()[:16]
    shapes = ";".join(f"{tuple(a.shape)}:{a.dtype}" if hasattr(a, "shape") else repr(a) for a in args)
    return f"{name}|{type(cell).__module__}.{type(cell).__qualname__}|{params}|{shapes}"
