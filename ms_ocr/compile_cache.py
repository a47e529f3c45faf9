"""The persistent compile cache: compiled graphs kept on disk across processes (MindSpore's compile cache behind a
manifest of every graph, so that a reload never mixes up the graphs of different input shapes), under a folder keyed
by everything that shapes a loaded model's graphs (runtime_key). CompileTimer (compiler.py) consults it around each
compile. It leans on MindSpore internals (its compile-cache context and dependency hash); where this MindSpore lacks
them it steps aside and everything is compiled the documented way.
"""

import fcntl
import functools
import hashlib
import json
import os
import shutil
import sys

import mindspore as ms


def _key(key_parts):
    return hashlib.sha256(json.dumps(key_parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


@functools.lru_cache(maxsize=None)
def _source_hash():
    """A hash of ms_ocr's own code (the .py files and the native kernels' sources): any change starts a new cache."""
    root = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha1()
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "demo"))
        for f in sorted(files):
            if f.endswith((".py", ".cc", ".h")):
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


def runtime_key(name, model_dir, plan, net, buckets, bf16_names=()):
    """The CompileCache key of a loaded VLM: everything that shapes its graphs besides each graph's inputs (its
    plan's part: Plan.key). `bf16_names`: the weights kept in bf16 (Plan.bf16_names), named here because a staged
    load has not read all of them when the key is made (their Parameters' dtypes do not say it yet)."""
    from ms_ocr import __version__
    with open(os.path.join(model_dir, "config.json"), "rb") as f:
        config = hashlib.sha256(f.read()).hexdigest()
    params = hashlib.sha256("\0".join(f"{p.name}:{tuple(p.shape)}:{p.dtype}" for p in net.get_parameters())
                            .encode()).hexdigest()
    return {"ms_ocr": __version__, "source": _source_hash(), "mindspore": ms.__version__,
            "python": list(sys.version_info[:2]), "model": name, "config": config, "parameters": params,
            "tied": bool(net.tied), "buckets": repr(buckets),
            "bf16_resident": hashlib.sha256("\0".join(sorted(bf16_names)).encode()).hexdigest(), **plan.key()}
