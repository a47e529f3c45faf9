"""Graph compilation, owned in one place: CompileTimer compiles each step once per input signature (timed apart
from run time, later calls straight to the graph executor) and frees idle shapes; CompileCache keeps compiled
graphs on disk across processes (MindSpore's compile cache, made safe to reuse).

Both lean on MindSpore internals (the graph executor's phases, its compile-cache context and dependency hash);
where this MindSpore lacks them they step aside and everything is compiled the documented way.
"""

import contextlib
import fcntl
import functools
import gc
import hashlib
import json
import os
import sys
import time

import numpy as np
import mindspore as ms
from mindspore import Tensor
from mindspore.nn import cell as _cell_module

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


def _key(key_parts):
    return hashlib.sha256(json.dumps(key_parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


@functools.lru_cache(maxsize=None)
def _source_hash():
    """A hash of ms_ocr's own code (the .py files and the native kernel source): any change starts a new cache."""
    root = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha1()
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "demo"))
        for f in sorted(files):
            if f.endswith((".py", ".cc")):
                path = os.path.join(base, f)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()[:16]


def cache_root():
    """Where compiled graphs are kept: $MS_OCR_COMPILE_CACHE_DIR, else ~/.cache/ms_ocr/compile."""
    return os.environ.get("MS_OCR_COMPILE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr",
                                                                      "compile")


def cache_enabled():
    """Off with MS_OCR_COMPILE_CACHE=0 (or "off"); also off where this MindSpore lacks the compile-cache API."""
    return os.environ.get("MS_OCR_COMPILE_CACHE", "1").lower() not in ("0", "off", "no") and \
        _dep_files_hook() is not None


def _dep_files_hook():
    try:
        from mindspore.graph import api
    except ImportError:
        return None
    return api if hasattr(api, "_get_compile_cache_dep_files") else None


class CompileCache:
    """Compiled graphs kept on disk, so a second process on the machine compiles nothing it compiled before.

    MindSpore's own compile cache (enable_compile_cache) stores the N-th graph a process compiles as
    compile_cache_N.mindir in one folder fixed for the process, and on a later run hands graph N to the N-th
    compile whatever that graph is: a run whose first image had another size got the graphs of the first run's
    shapes (wrong gather indices). This class makes that safe:
    - one folder per key (everything that shapes the graphs: ms_ocr's code, MindSpore's version, device, model
      config, dtypes and bf16-resident weights, native kernel routes, buckets);
    - a manifest, in compile order, of each graph's identity (graph_key) and the sha256 of its file. Before the
      N-th compile the identity must equal entry N, and its file must still hash as recorded (else the file is
      removed and MindSpore compiles and writes it again, with a warning). At the first graph that differs
      (another page size), the cache is switched off for the rest of the process: nothing is read, nothing
      overwritten. Graphs past the end of the manifest are compiled, written and appended;
    - MindSpore's dependency check hashes the entry script's imports (so `infer` and `batch` would overwrite
      each other's files): it is given the folder's key file instead;
    - one process at a time owns a folder (flock, released when the process ends, even by SIGKILL); a process
      that finds it taken runs without the cache.
    The KEEP_FOLDERS most recently used folders are kept. Clear it with `rm -rf ~/.cache/ms_ocr/compile` (or
    $MS_OCR_COMPILE_CACHE_DIR); MS_OCR_COMPILE_CACHE=0 turns it off."""

    active = None  # the process's cache, once activated (MindSpore's cache folder is fixed per process)
    MANIFEST = "manifest.json"

    def __init__(self, key_parts, root=None):
        self.key_parts = dict(key_parts)
        self.key = _key(self.key_parts)
        self.dir = os.path.join(root or cache_root(), self.key)
        self.entries = []      # manifest: [{"graph": graph_key, "sha256": file hash}] in compile order
        self.index = 0         # graphs this process has compiled (MindSpore's compile_cache_N counter)
        self.enabled = False
        self.loaded = 0        # graphs whose cached file was used
        self.written = 0       # graphs compiled and stored
        self._lock = None
        self._pending = None   # (index, graph, write) announced by before_compile
        self._compiled = None  # the same, once MindSpore compiled it

    # ---- set-up ---------------------------------------------------------------------------------------------
    @classmethod
    def activate(cls, key_parts, root=None):
        """Turn the cache on for this process (once; later calls return the first cache). None when disabled."""
        if cls.active is not None:
            if cls.active.key != _key(key_parts):  # a second model in this process: the folder is fixed
                cls.active.disable()
                return None
            return cls.active
        if not cache_enabled() or _compiled_any():  # MindSpore numbers graphs from the process's first compile
            return None
        cache = cls(key_parts, root)
        if cache._open():
            cls.active = cache
            _hook_executors()
        return cls.active

    def _open(self):
        try:
            os.makedirs(self.dir, exist_ok=True)
            self._lock = open(os.path.join(self.dir, ".lock"), "a")
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another process owns it (or the folder cannot be written): compile as usual
            if self._lock is not None:
                self._lock.close()
            self._lock = None
            return False
        self.entries = self._read_manifest()
        os.utime(self.dir)  # most recently used
        _prune(os.path.dirname(self.dir), keep=KEEP_FOLDERS)
        key_file = os.path.join(self.dir, "key.json")
        with open(key_file + ".tmp", "w") as f:
            json.dump(self.key_parts, f, indent=1, sort_keys=True, default=str)
        os.replace(key_file + ".tmp", key_file)
        api = _dep_files_hook()
        api._get_compile_cache_dep_files = lambda: [key_file]  # MindSpore's dependency hash: our key, not imports
        ms.set_context(enable_compile_cache=True, compile_cache_path=self.dir)
        self.enabled = True
        return True

    def _read_manifest(self):
        path = os.path.join(self.dir, self.MANIFEST)
        if not os.path.exists(path):
            return []
        try:
            with open(path) as f:
                entries = json.load(f)["entries"]
            if all(isinstance(e, dict) and isinstance(e.get("graph"), str) and isinstance(e.get("sha256"), str)
                   for e in entries):
                return entries
        except (OSError, ValueError, KeyError, TypeError):
            pass
        _warn(f"compile cache {self.dir}: unreadable manifest, starting the folder afresh")
        self._clear_files()
        return []

    def _clear_files(self):
        graphs = self._graph_dir()
        if os.path.isdir(graphs):
            for name in os.listdir(graphs):
                os.remove(os.path.join(graphs, name))

    def _graph_dir(self):
        return os.path.join(self.dir, "rank_0", "graph_cache")

    def _file(self, index):
        return os.path.join(self._graph_dir(), f"compile_cache_{index}.mindir")

    # ---- around each compile ---------------------------------------------------------------------------------
    def before_compile(self, graph):
        """Called by CompileTimer before a step may compile, with the graph's identity."""
        self._pending = None
        if not self.enabled:
            return
        i = self.index
        if i < len(self.entries):
            entry = self.entries[i]
            if entry["graph"] != graph:  # this run's graphs part from the stored run's here
                self.disable()
                return
            path = self._file(i)
            if not os.path.exists(path) or _sha256(path) != entry["sha256"]:
                _warn(f"compile cache entry {i} ({path}) is missing or corrupt: compiling it again")
                _remove(path)
                self._pending = (i, graph, True)
            else:
                self._pending = (i, graph, False)
        else:
            _remove(self._file(i))  # a file the manifest does not vouch for (a run that died mid-write)
            self._pending = (i, graph, True)

    def _on_compile(self):
        """MindSpore is about to compile a graph (its N-th in this process; our hook on its executors). A compile
        CompileTimer did not announce (a Cell called directly, a jit function) would shift MindSpore's numbering
        against the manifest: the cache is switched off before it."""
        if not self.enabled:
            return
        if self._pending is None or self._pending[0] != self.index:
            self.disable()
            return
        self.index += 1
        self._compiled = self._pending

    def after_compile(self):
        """Called by CompileTimer after that step ran: a graph MindSpore has just written joins the manifest."""
        compiled, self._compiled, self._pending = self._compiled, None, None
        if not self.enabled or compiled is None:
            return
        i, graph, write = compiled
        if not write:
            self.loaded += 1
            return
        path = self._file(i)
        if not os.path.exists(path):  # MindSpore stored nothing for it (a graph kind it does not cache)
            self.disable()
            return
        self.entries = self.entries[:i] + [{"graph": graph, "sha256": _sha256(path)}] + self.entries[i + 1:]
        self.written += 1
        self._write_manifest()

    def safely(self, step, *args):
        """Run a bookkeeping step; a file-system error (a full disk, a folder made read-only) turns the cache off
        for the rest of the process with a warning, never failing the request."""
        try:
            step(*args)
        except OSError as e:
            _warn(f"compile cache {self.dir}: {e.strerror or e}; compiling without it from here on")
            self.disable()

    def disable(self):
        """No more reading or writing for this process (MindSpore's cache off)."""
        if self.enabled:
            ms.set_context(enable_compile_cache=False)
            self.enabled = False

    def _write_manifest(self):
        path = os.path.join(self.dir, self.MANIFEST)
        with open(path + ".tmp", "w") as f:
            json.dump({"key": self.key, "entries": self.entries}, f, indent=1)
        os.replace(path + ".tmp", path)


KEEP_FOLDERS = 8  # cache folders kept (a new ms_ocr version or configuration starts a new one): the most recent


def _prune(root, keep):
    """Remove all but the `keep` most recently used cache folders under `root` (none in use by a process)."""
    import shutil
    try:
        folders = [os.path.join(root, d) for d in os.listdir(root)]
    except OSError:
        return
    folders = sorted((f for f in folders if os.path.isfile(os.path.join(f, ".lock"))), key=os.path.getmtime,
                     reverse=True)
    for folder in folders[keep:]:
        try:
            with open(os.path.join(folder, ".lock"), "a") as lock:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(folder)
        except OSError:  # in use, or not ours to remove
            continue


def _compiled_any():
    """Whether this process has compiled a graph already (MindSpore's set of compiled phases)."""
    from mindspore.graph import api
    return bool(getattr(api, "ms_compile_cache", None))


_HOOKED = []


def _hook_executors():
    """Count every graph MindSpore compiles: both executors call _set_compile_cache_dep_files once per compile,
    just before it (Cells: _CellGraphExecutor.compile; jit functions: _JitExecutor)."""
    if _HOOKED:
        return
    from mindspore.graph import api
    for cls_name in ("_CellGraphExecutor", "_JitExecutor"):
        cls = getattr(api, cls_name, None)
        original = getattr(cls, "_set_compile_cache_dep_files", None)
        if original is None:
            continue

        def counted(self, *args, _original=original):
            if CompileCache.active is not None:
                CompileCache.active._on_compile()
            return _original(self, *args)

        cls._set_compile_cache_dep_files = counted
        _HOOKED.append(cls_name)


def _remove(path):
    if os.path.exists(path):
        os.remove(path)  # MindSpore writes its cache files read-only: unlinking needs only the folder writable


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _warn(message):
    print(f"warning: {message}", file=sys.stderr)


def runtime_key(name, model_dir, target, compute_dtype, round_to, net, buckets, quantize="none", bf16_names=(),
                kv_dtype=None):
    """The CompileCache key of a loaded VLM: everything that shapes its graphs besides each graph's inputs.
    `bf16_names`: the weights kept in bf16 (device.bf16_resident), named here because a staged load has not read
    all of them when the key is made (their Parameters' dtypes do not say it yet)."""
    from ms_ocr import __version__
    from ms_ocr.ops import backend, native
    with open(os.path.join(model_dir, "config.json"), "rb") as f:
        config = hashlib.sha256(f.read()).hexdigest()
    params = hashlib.sha256("\0".join(f"{p.name}:{tuple(p.shape)}:{p.dtype}" for p in net.get_parameters())
                            .encode()).hexdigest()
    kernels = native.load() if target == "CPU" else None
    return {"ms_ocr": __version__, "source": _source_hash(), "mindspore": ms.__version__,
            "python": list(sys.version_info[:2]), "target": target, "model": name, "config": config,
            "parameters": params, "compute_dtype": str(compute_dtype), "round_to": round_to,
            "tied": bool(getattr(net, "tied", False)), "fused": backend.FUSED, "routes": sorted(backend.routed()),
            "bf16_natives": [backend.NATIVE_GATHER_ROWS is not None, backend.NATIVE_WIDEN is not None],
            "native": kernels.isa_level if kernels else None, "buckets": repr(buckets), "quantize": quantize,
            "bf16_resident": hashlib.sha256("\0".join(sorted(bf16_names)).encode()).hexdigest(),
            "kv_dtype": str(kv_dtype or compute_dtype)}
