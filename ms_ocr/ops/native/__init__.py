"""CPU kernels of our own (the C++ sources beside this file) as MindSpore Custom AOT operators.

MindSpore 2.10's CPU MatMul reads a very large matrix-vector product's weight (a VLM's head, every decode step) well
below the rate a plain vector loop over a block of weight rows on every core reaches, and its runtime's launches
between small kernels cost more than their arithmetic (docs/native-kernels.md). The sources are one file per kernel
family over a vector width (kernels.h lists the entry points); the install compiles them into one library per ISA
level (libraries.py: x86-64-v3, x86-64-v4 and native on x86-64, armv8-a and native on aarch64) and `load` opens the
best one this CPU runs, compiling nothing. The library reports the SIMD level it was compiled for (`isa_level`:
"avx512", "avx2", "neon", "sse2" or "scalar"), and the ops route to each kernel only at the levels where it was
measured faster than MindSpore's composed path (docs/native-kernels.md). MS_OCR_NATIVE_ARCH=<target> loads the
library of another -march (an installed level, or any target, built on first use into $MS_OCR_HOME/kernels/, e.g.
x86-64-v2 for the SSE2 build). Where no library runs (none built: no compiler at install; a CPU none was built for)
or MS_OCR_NATIVE=0 is set, `load` returns None, saying why in one line on stderr (MS_OCR_NATIVE=0: silently), and
the ops keep MindSpore's kernels; nothing else changes.
"""

import ctypes
import hashlib
import os
import platform
import subprocess
import sys

from ms_ocr.ops.native import libraries
from ms_ocr.ops.native.libraries import FLAGS, LIB_NAME, LIBS, cpu_tag  # noqa: F401 (the tests build with them)

ENV_SWITCH = "MS_OCR_NATIVE"
ARCH_ENV = "MS_OCR_NATIVE_ARCH"  # the -march of the library to load (default: the best installed for this CPU)
LIB_DIR = libraries.LIB_DIR  # the install's libraries
ISA_LEVELS = ("avx512", "avx2", "neon", "sse2", "scalar")
NOT_BUILT = ("native CPU kernels unavailable: none {why}; ms_ocr runs on MindSpore's kernels, slower; {fix} to build "
             "them")

_state = {}


class NativeKernels:
    """A loaded kernel library: its path (for ops.Custom's "path:function"), the -march it was built for where
    known, and the ctypes handle."""

    def __init__(self, path, march=None):
        self.path = path
        self.march = march
        self.lib = ctypes.CDLL(path)
        self.lib.ms_ocr_set_threads.argtypes = [ctypes.c_int]
        self.lib.ms_ocr_matmul_t_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_decode_layer_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_vision_attention_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_gelu_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_moe_experts_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_isa_level.restype = ctypes.c_char_p
        self.lib.ms_ocr_gemm_bf16_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_gemm_amx_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_conv_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_deformable_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_load_dnnl.argtypes = [ctypes.c_char_p]
        self.lib.ms_ocr_amx_init.argtypes = [ctypes.c_int]
        self.lib.ms_ocr_amx_products.restype = ctypes.c_int
        self.lib.ms_ocr_dpbf16_init.argtypes = [ctypes.c_int]
        self.lib.ms_ocr_read_sum.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        self.lib.ms_ocr_read_sum.restype = ctypes.c_float
        self.lib.ms_ocr_quantize_rows.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                                  ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
        self._dnnl = None

    def func(self, name):
        return f"{self.path}:{name}"

    def set_threads(self, n):
        """Threads the kernels use. Call it before the calling thread's priority is lowered: the OpenMP pool is
        created here and its threads keep the priority they start with."""
        self.lib.ms_ocr_set_threads(int(n))

    def quantize_rows(self, rows, out, scales, run):
        """--quantize int8 of `rows` [N, K] (C-contiguous float32, or bf16 words as uint16) into `out` (int8 [N, K])
        and `scales` (float32, N * K / run), one scale per run of `run` columns: models/quantize.py quantize_rows'
        values, bit for bit, on the kernels' threads."""
        import numpy as np
        n, k = rows.shape
        assert rows.flags.c_contiguous and out.flags.c_contiguous and scales.flags.c_contiguous
        assert rows.dtype in (np.float32, np.uint16) and out.dtype == np.int8 and out.shape == rows.shape
        assert scales.dtype == np.float32 and scales.size == n * (k // run)
        status = self.lib.ms_ocr_quantize_rows(rows.ctypes.data, int(rows.dtype == np.uint16), n, k, run,
                                               out.ctypes.data, scales.ctypes.data)
        if status:
            raise ValueError(f"quantize_rows: {k} columns are not a multiple of {run}")

    @property
    def matmul_t_calls(self):
        """How many MatMulT products ran in this process (diagnostics and tests)."""
        return self.lib.ms_ocr_matmul_t_calls()

    @property
    def decode_layer_calls(self):
        """How many DecodeLayer kernels (one decoder layer of a decode step each) ran in this process."""
        return self.lib.ms_ocr_decode_layer_calls()

    @property
    def attention_calls(self):
        """How many VisionAttention kernels ran in this process."""
        return self.lib.ms_ocr_vision_attention_calls()

    @property
    def gelu_calls(self):
        """How many GeluTanh / GeluErf kernels ran in this process."""
        return self.lib.ms_ocr_gelu_calls()

    @property
    def moe_experts_calls(self):
        """How many MoeExperts kernels ran in this process."""
        return self.lib.ms_ocr_moe_experts_calls()

    @property
    def conv_calls(self):
        """How many Conv2dAffine kernels ran in this process."""
        return self.lib.ms_ocr_conv_calls()

    @property
    def deformable_calls(self):
        """How many DeformableSample kernels ran in this process."""
        return self.lib.ms_ocr_deformable_calls()

    @property
    def has_sgemm(self):
        """Whether Conv2dAffine has oneDNN's fp32 gemm (after load_dnnl)."""
        return bool(self.lib.ms_ocr_has_sgemm())

    @property
    def gemm_bf16_calls(self):
        """How many GemmBf16 products ran in this process."""
        return self.lib.ms_ocr_gemm_bf16_calls()

    @property
    def gemm_amx_calls(self):
        """How many GemmAmx products (the exact product on the AMX tiles) ran in this process."""
        return self.lib.ms_ocr_gemm_amx_calls()

    def load_dnnl(self):
        """Whether GemmBf16 has its oneDNN: the libdnnl MindSpore's wheel ships (mindspore/lib), opened once."""
        if self._dnnl is None:
            path = dnnl_path()
            self._dnnl = path is not None and self.lib.ms_ocr_load_dnnl(path.encode()) == 0
        return self._dnnl

    def amx_init(self, on=True):
        """Turn the AMX tiles on (when the CPU has AMX-BF16 and Linux grants the tile state) or off for
        DecodeLayerBf16, MatMulTBf16, VisionAttentionBf16(Rows) and GemmBf16 (off: oneDNN's bf16 GEMM): whether they
        are on."""
        return bool(self.lib.ms_ocr_amx_init(1 if on else 0))

    @property
    def amx_products(self):
        """Whether GemmAmx (the exact path's products on the AMX tiles) can run: the CPU has AMX-BF16 and Linux
        granted the tile state (asked once; switches nothing, unlike amx_init)."""
        return bool(self.lib.ms_ocr_amx_products())

    def dpbf16_init(self, on=True):
        """Turn VisionAttentionBf16(Rows)'s AVX512_BF16 kernel on (when the CPU has AVX512_BF16) or off: whether it is
        on. It serves where the tiles are off or the head dim is past theirs."""
        return bool(self.lib.ms_ocr_dpbf16_init(1 if on else 0))

    def read_sum(self, values):
        """The sum of a contiguous float32 array (its size a multiple of 64) read by the decode team's threads with
        vector loads: the read bench/memory.py times."""
        import numpy as np
        if values.dtype != np.float32 or not values.flags.c_contiguous or values.size % 64:
            raise ValueError("read_sum takes a contiguous float32 array of a multiple of 64 values")
        return float(self.lib.ms_ocr_read_sum(values.ctypes.data, values.size))

    @property
    def isa_level(self):
        """The SIMD level the library was compiled for (one of ISA_LEVELS), as it reports it (simd.h)."""
        return self.lib.ms_ocr_isa_level().decode()


def _compiler_version(cxx):
    return libraries.compiler_version(cxx)


def cache_dir():
    """Where libraries of other targets are built on demand: $MS_OCR_HOME/kernels (default ~/.cache/ms_ocr)."""
    home = os.environ.get("MS_OCR_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr")
    return os.path.join(home, "kernels")


def build_arch():
    """The -march of the process's library: the level `load` picked, else $MS_OCR_NATIVE_ARCH, else native."""
    return _state.get("march") or os.environ.get(ARCH_ENV) or "native"


def build(dst_dir=None, cxx=None, arch=None):
    """The path of a library built for `-march=arch` (default $MS_OCR_NATIVE_ARCH, else native): the install's when
    it has a fresh one (and no `dst_dir` is given), else compiled into `dst_dir` (default cache_dir()) under a folder
    keyed by the sources, the compiler, the flags and the CPU, once. The tests build every ISA level the machine
    runs this way (x86-64-v2/v3/v4, native).

    Raises OSError / subprocess.CalledProcessError / subprocess.TimeoutExpired when it cannot be built."""
    cxx = cxx or os.environ.get("CXX", "g++")
    arch = arch or os.environ.get(ARCH_ENV) or "native"
    if dst_dir is None:
        found = libraries.installed(arch, LIB_DIR)
        if found:
            return found
    flags = (f"-march={arch}",) + FLAGS + libraries.LINK_FLAGS + LIBS
    key = hashlib.sha256(b"\0".join([(libraries.source_digest() or "").encode(), _compiler_version(cxx).encode(),
                                     " ".join(flags).encode(), cpu_tag().encode()])).hexdigest()[:16]
    path = os.path.join(dst_dir or cache_dir(), key, LIB_NAME)
    if not os.path.isfile(path):
        libraries.compile_libraries([(path, arch)], cxx)
    return path


def _library():
    """(path, -march) of the library this process loads, or None after saying why on stderr."""
    arch = os.environ.get(ARCH_ENV)
    if arch:  # a developer's choice of build: compiled here when the install has none
        return build(arch=arch), arch
    recs = libraries.records(LIB_DIR)
    digest = libraries.source_digest()
    fresh = [r for r in recs if libraries.is_fresh(r, digest)]
    chosen = libraries.pick(fresh, libraries.cpu_flags(), cpu_tag())
    if chosen is None and len(fresh) < len(recs) and libraries.compiler() is not None:
        # a source tree whose kernels changed since its set-up built them: this CPU's own build, once
        print("[ms_ocr] the native kernel sources changed since they were built: building them for this CPU",
              file=sys.stderr)
        libraries.install(LIB_DIR, ["native"])
        chosen = libraries.pick(libraries.records(LIB_DIR), libraries.cpu_flags(), cpu_tag())
    if chosen is not None:
        return chosen["path"], chosen["march"]
    if libraries.compiler() is None:
        why, fix = "built (no C++ compiler at the set-up)", f"install g++ and run {libraries.HINT}"
    else:
        why, fix = "built for this CPU", f"run {libraries.HINT} (or ./ocr.sh's set-up)"
    print("[ms_ocr] " + NOT_BUILT.format(why=why, fix=fix), file=sys.stderr)
    return None


def load():
    """The process's NativeKernels, loaded on first call; None where unavailable (see the module docstring) — the
    reason is printed once to stderr."""
    if "kernels" in _state:
        return _state["kernels"]
    kernels = None
    if os.environ.get(ENV_SWITCH, "1") != "0" and sys.platform.startswith("linux"):
        try:
            found = _library()
            if found is not None:
                kernels = NativeKernels(*found)
                _state["march"] = found[1]
        except (OSError, subprocess.SubprocessError) as e:
            print(f"[ms_ocr] native CPU kernels unavailable, using MindSpore's ({libraries.first_error(e)})",
                  file=sys.stderr)
    _state["kernels"] = kernels
    return kernels


def isa_level():
    """The SIMD level of the process's kernel library ("avx512", "avx2", "neon", "sse2", "scalar"), or None when
    it is unavailable."""
    kernels = load()
    return kernels.isa_level if kernels is not None else None


def cpu_model():
    """The CPU's model name with its family/model numbers where /proc/cpuinfo has them (benchmark reports;
    a virtual machine may name only the vendor line, e.g. "AMD EPYC", and family 26 tells Zen 5)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or fields.get("Model name") or platform.processor() or platform.machine()
    if "cpu family" in fields:
        name += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return name


def dnnl_path():
    """The oneDNN library of the installed MindSpore (mindspore/lib/libdnnl.so.*), or None. Found by the package's
    location, without importing it."""
    import glob
    import importlib.util
    spec = importlib.util.find_spec("mindspore")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(folder, "lib", "libdnnl.so*")))
        if found:
            return found[-1]
    return None


def cpu_bf16_dot():
    """Whether the CPU has bf16 dot-product instructions (x86 AVX512_BF16 or AMX-BF16; Arm's BF16 extension), as
    /proc/cpuinfo lists them: the CPUs where products in bf16 are faster than in fp32."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    words = set(value.split())
                    return bool(words & {"avx512_bf16", "amx_bf16", "bf16"})
    except OSError:
        pass
    return False
