"""CPU kernels of our own (kernels.cc beside this file) as MindSpore Custom AOT operators.

MindSpore 2.10's CPU MatMul reads a very large matrix-vector product's weight (a VLM's head, every decode step) well
below the rate a plain vector loop over a block of weight rows on every core reaches, and its runtime's launches
between small kernels cost more than their arithmetic (docs/native-kernels.md). The library is compiled on first use
with the machine's C++ compiler (`$CXX`, default g++; `-O3 -march=native -fopenmp`; MS_OCR_NATIVE_ARCH=<target>
builds for another -march, e.g. x86-64-v3 for AVX2/FMA) into a cache folder keyed by the source, the compiler, the
flags and the CPU, and loaded once. kernels.cc is one source over a vector width: the library reports the SIMD level
it was compiled for (`isa_level`: "avx512", "avx2", "neon", "sse2" or "scalar"), and ops/backend.py routes to each
kernel only at the levels where it was measured faster than MindSpore's composed path (docs/native-kernels.md).
Where it cannot be built (no compiler, a failing build) or MS_OCR_NATIVE=0 is set, `load` returns None and the ops
keep MindSpore's kernels; nothing else changes.
"""

import ctypes
import hashlib
import os
import platform
import subprocess
import sys
import tempfile

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels.cc")
ENV_SWITCH = "MS_OCR_NATIVE"
ARCH_ENV = "MS_OCR_NATIVE_ARCH"  # the -march target of the build (default: native)
LIB_NAME = "libms_ocr_kernels.so"
# -ffp-contract=fast: the kernels' a * b + c on vectors become FMAs where the ISA has them
FLAGS = ("-O3", "-ffp-contract=fast", "-fopenmp", "-shared", "-fPIC", "-std=c++17")
LIBS = ("-ldl",)  # GemmBf16 opens MindSpore's oneDNN at run time
ISA_LEVELS = ("avx512", "avx2", "neon", "sse2", "scalar")

_state = {}


class NativeKernels:
    """A loaded kernel library: its path (for ops.Custom's "path:function") and the ctypes handle."""

    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.lib.ms_ocr_set_threads.argtypes = [ctypes.c_int]
        self.lib.ms_ocr_matmul_t_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_decode_layer_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_vision_attention_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_gelu_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_moe_experts_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_isa_level.restype = ctypes.c_char_p
        self.lib.ms_ocr_gemm_bf16_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_conv_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_deformable_calls.restype = ctypes.c_int64
        self.lib.ms_ocr_load_dnnl.argtypes = [ctypes.c_char_p]
        self.lib.ms_ocr_amx_init.argtypes = [ctypes.c_int]
        self.lib.ms_ocr_dpbf16_init.argtypes = [ctypes.c_int]
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

    def load_dnnl(self):
        """Whether GemmBf16 has its oneDNN: the libdnnl MindSpore's wheel ships (mindspore/lib), opened once."""
        if self._dnnl is None:
            path = dnnl_path()
            self._dnnl = path is not None and self.lib.ms_ocr_load_dnnl(path.encode()) == 0
        return self._dnnl

    def amx_init(self, on=True):
        """Turn the AMX tiles on (when the CPU has AMX-BF16 and Linux grants the tile state) or off for
        DecodeLayerBf16, MatMulTBf16 and VisionAttentionBf16(Rows): whether they are on."""
        return bool(self.lib.ms_ocr_amx_init(1 if on else 0))

    def dpbf16_init(self, on=True):
        """Turn VisionAttentionBf16(Rows)'s AVX512_BF16 kernel on (when the CPU has AVX512_BF16) or off: whether it is
        on. It serves where the tiles are off or the head dim is past theirs."""
        return bool(self.lib.ms_ocr_dpbf16_init(1 if on else 0))

    @property
    def isa_level(self):
        """The SIMD level the library was compiled for (one of ISA_LEVELS), as kernels.cc reports it."""
        return self.lib.ms_ocr_isa_level().decode()


def _cpu_tag():
    """What -march=native depends on: the CPU model and its flags."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        lines = [line for line in info.splitlines() if line.startswith(("model name", "flags"))]
        return "\n".join(sorted(set(lines)))
    except OSError:
        return platform.processor()


def _compiler_version(cxx):
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.splitlines()[0] if out.stdout else cxx


def cache_dir():
    home = os.environ.get("MS_OCR_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr")
    return os.path.join(home, "kernels")


def build_arch():
    """The -march target builds use: $MS_OCR_NATIVE_ARCH, else native."""
    return os.environ.get(ARCH_ENV) or "native"


def build(dst_dir=None, cxx=None, arch=None):
    """Compile kernels.cc for `-march=arch` (default `build_arch()`; once per source, compiler, flags and CPU) and
    return the library's path. Tests build every ISA level the machine runs (x86-64-v2/v3/v4, native).

    Raises OSError / subprocess.CalledProcessError / subprocess.TimeoutExpired when it cannot be built."""
    cxx = cxx or os.environ.get("CXX", "g++")
    arch = arch or build_arch()
    with open(SOURCE, "rb") as f:
        source = f.read()
    flags = (f"-march={arch}",) + FLAGS
    key = hashlib.sha256(b"\0".join([source, _compiler_version(cxx).encode(), " ".join(flags + LIBS).encode(),
                                     _cpu_tag().encode()])).hexdigest()[:16]
    folder = os.path.join(dst_dir or cache_dir(), key)
    path = os.path.join(folder, LIB_NAME)
    if os.path.isfile(path):
        return path
    os.makedirs(folder, exist_ok=True)
    # build beside the target and rename: concurrent first runs never load a half-written library
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(fd)
    try:
        subprocess.run([cxx, *flags, SOURCE, "-o", tmp, *LIBS], capture_output=True, text=True, timeout=300, check=True)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def load():
    """The process's NativeKernels, built and loaded on first call; None where unavailable (see the module
    docstring) — the reason is printed once to stderr."""
    if "kernels" in _state:
        return _state["kernels"]
    kernels = None
    if os.environ.get(ENV_SWITCH, "1") != "0" and sys.platform.startswith("linux"):
        try:
            kernels = NativeKernels(build())
        except (OSError, subprocess.SubprocessError) as e:
            lines = (getattr(e, "stderr", None) or str(e)).strip().splitlines() or [type(e).__name__]
            print(f"[ms_ocr] native CPU kernels unavailable, using MindSpore's ({lines[-1]})", file=sys.stderr)
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
