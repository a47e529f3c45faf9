"""CPU kernels of our own (kernels.cc beside this file) as MindSpore Custom AOT operators.

MindSpore 2.10's CPU MatMul reads a very large matrix-vector product's weight at ~15-20 GB/s on this machine
(the 424 MB PaddleOCR-VL head: 22-27 ms per token), where a plain AVX-512 loop over 8 weight rows at a time
on both cores reads 29-41 GB/s. The library is compiled on first use with the machine's C++ compiler
(`$CXX`, default g++; `-O3 -march=native -fopenmp`) into a cache folder keyed by the source, the compiler and
the CPU, and loaded once. Where it cannot be built (no compiler, a failing build) or MS_OCR_NATIVE=0 is set,
`load` returns None and the ops keep MindSpore's kernels; nothing else changes.
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
LIB_NAME = "libms_ocr_kernels.so"
FLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC", "-std=c++17")

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

    def func(self, name):
        return f"{self.path}:{name}"

    def set_threads(self, n):
        """Threads the kernels use. Call it before the calling thread's priority is lowered: the OpenMP pool is
        created here and its threads keep the priority they start with."""
        self.lib.ms_ocr_set_threads(int(n))

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
    def avx512(self):
        return bool(self.lib.ms_ocr_has_avx512())


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


def build(dst_dir=None, cxx=None, arch="native"):
    """Compile kernels.cc for `-march=arch` (once per source, compiler, flags and CPU) and return the library's
    path. Tests build other targets (e.g. x86-64-v2, no AVX-512) to run the portable loops.

    Raises OSError / subprocess.CalledProcessError / subprocess.TimeoutExpired when it cannot be built."""
    cxx = cxx or os.environ.get("CXX", "g++")
    with open(SOURCE, "rb") as f:
        source = f.read()
    flags = (f"-march={arch}",) + FLAGS
    key = hashlib.sha256(b"\0".join([source, _compiler_version(cxx).encode(), " ".join(flags).encode(),
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
        subprocess.run([cxx, *flags, SOURCE, "-o", tmp], capture_output=True, text=True, timeout=300, check=True)
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
