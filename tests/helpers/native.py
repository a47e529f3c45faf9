"""Markers, builds and the standalone harness for the tests of the native CPU kernels (ms_ocr/ops/native)."""

import os
import platform
import shutil
import subprocess

import numpy as np
import pytest

from ms_ocr.ops import kernels as routes, native
from ms_ocr.ops.native import libraries

CXX = os.environ.get("CXX", "g++")
AARCH64_CXX = "aarch64-linux-gnu-g++"
AARCH64_SYSROOT = "/usr/aarch64-linux-gnu"
QEMU = "qemu-aarch64"
HARNESS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ops", "kernel_harness.cc")

needs_compiler = pytest.mark.skipif(shutil.which(CXX) is None, reason="no C++ compiler on this machine")
needs_x86 = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64-v2/v3/v4 are x86 targets")
needs_aarch64_tools = pytest.mark.skipif(
    shutil.which(AARCH64_CXX) is None or shutil.which(QEMU) is None,
    reason=f"no {AARCH64_CXX} / {QEMU} (apt-get install g++-aarch64-linux-gnu qemu-user)")


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# The -march targets the tests build, each with the SIMD level its library must report: x86-64-v2 (SSE2 vectors,
# the fallback of an x86 CPU without AVX2/FMA), x86-64-v3 (AVX2/FMA), x86-64-v4 (AVX-512) where this CPU runs
# them, and native. Each case is (arch, level); levels this CPU cannot execute are left out.
def isa_builds():
    builds = []
    if platform.machine() == "x86_64":
        flags = _cpu_flags()
        builds.append(("x86-64-v2", "sse2"))
        if {"avx2", "fma"} <= flags:
            builds.append(("x86-64-v3", "avx2"))
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
            builds.append(("x86-64-v4", "avx512"))
    builds.append(("native", None))  # the level the machine's own build reports
    return builds


def build_kernels(arch):
    """The library built for -march=arch (cached like the runtime's own build), on 2 threads."""
    kernels = native.NativeKernels(native.build(arch=arch))
    kernels.set_threads(2)
    return kernels


def build_harness(out_dir, cxx, arch_flags=(), library=None):
    """tests/ops/kernel_harness.cc into a standalone executable: compiled with the kernels' sources, or linked
    against `library`, a build of them (native.build: the very library the runtime loads, and no second compile of
    the kernels)."""
    exe = os.path.join(out_dir, "kernel_harness")
    include = f"-I{libraries.HERE}"
    if library is None:
        cmd = [cxx, *arch_flags, *native.FLAGS[:3], "-std=c++17", include, *libraries.compiled_sources(), HARNESS,
               "-o", exe, *native.LIBS]
    else:
        cmd = [cxx, "-O1", "-std=c++17", include, HARNESS, library, f"-Wl,-rpath,{os.path.dirname(library)}", "-o",
               exe]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900)
    return exe


def bf16_bits(a):
    """bf16-exact float32 values as the bfloat16 words the kernels read (the high halves; exact)."""
    a = np.ascontiguousarray(a, np.float32)
    bits = a.view(np.uint32)
    assert not (bits & 0xFFFF).any(), "not bf16-exact"
    return (bits >> 16).astype(np.uint16)


def run_harness(runner, kernel, inputs, out_shapes, work_dir, threads=2):
    """Run `kernel` of a harness executable (`runner`: the command prefix, e.g. [qemu, -L, sysroot, exe]) on
    inputs: uint16 arrays are passed as bfloat16 words (bf16_bits), int32 and int8 arrays as they are, others as
    float32; returns (its fp32 outputs as arrays of out_shapes, the ISA level it reports)."""
    os.makedirs(work_dir, exist_ok=True)
    inputs = [np.ascontiguousarray(a) if np.asarray(a).dtype in (np.uint16, np.int32, np.int8)
              else np.ascontiguousarray(a, np.float32) for a in inputs]
    with open(os.path.join(work_dir, "spec.txt"), "w") as f:
        f.write(f"{len(inputs) + len(out_shapes)} {len(inputs)}\n")
        names = {np.dtype(np.uint16): "bfloat16", np.dtype(np.int32): "int32", np.dtype(np.int8): "int8"}
        dtypes = [names.get(a.dtype, "float32") for a in inputs] + ["float32"] * len(out_shapes)
        for dtype, shape in zip(dtypes, [a.shape for a in inputs] + [tuple(s) for s in out_shapes]):
            f.write(" ".join(str(v) for v in (dtype, len(shape), *shape)) + "\n")
    for i, a in enumerate(inputs):
        a.tofile(os.path.join(work_dir, f"in{i}.bin"))
    proc = subprocess.run([*runner, kernel, work_dir, str(threads)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{kernel}: exit {proc.returncode}: {proc.stderr}"
    outs = [np.fromfile(os.path.join(work_dir, f"out{j}.bin"), np.float32).reshape(s)
            for j, s in enumerate(out_shapes)]
    return outs, proc.stdout.strip()


# MindSpore's error when a native kernel returns non-zero (its refusal of shapes or dtypes it cannot read); the
# refusal tests run in PyNative, where it comes at once (in graph mode each refusal took ~3.4 s)
KERNEL_REFUSED = "user defined error"


def op_cell(op, kn=None):
    """A Cell that calls `op` on its inputs: a Custom op run as a graph, or with kernels `kn` an ops function (which
    takes them first)."""
    from mindspore import nn

    class OpCell(nn.Cell):
        def __init__(self):
            super().__init__()
            self.op, self.kn = op, kn

        def construct(self, *args):
            if self.kn is None:
                return self.op(*args)
            return self.op(self.kn, *args)

    return OpCell()


def bf16_kernels(monkeypatch, amx):
    """The CPU's kernels with products in bf16 (--dtype bf16: ops.kernels.with_bf16_products), the AMX tiles allowed
    or turned off (MS_OCR_AMX=0)."""
    if amx:
        monkeypatch.delenv(routes.AMX_ENV, raising=False)
    else:
        monkeypatch.setenv(routes.AMX_ENV, "0")
    kn = routes.choose("CPU")
    assert routes.bf16_products_refused("CPU", kn) is None
    return routes.with_bf16_products(kn)


def kernels_with(monkeypatch, **fields):
    """Models loaded from here on get the CPU's kernels with `fields` replaced (e.g. attention=None: the composed
    attention), as ops.kernels.choose would give them."""
    import dataclasses

    choose = routes.choose
    monkeypatch.setattr(routes, "choose", lambda target: dataclasses.replace(choose(target), **fields))


def bound(cell):
    """`cell` computing with the CPU's kernels as a process on this machine chooses them (the loaders bind them)."""
    return routes.bind(cell, routes.choose("CPU"))
