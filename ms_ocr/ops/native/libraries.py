"""The native kernel libraries: the C++ sources beside this file compiled into one shared library per ISA level at
install, and the pick of the best one a CPU runs (the way ggml's CPU backend builds and picks its variants).

The install builds (setup.py's build step under `pip install .` / `pip install -e .`, and scripts/ensure_env.sh, the
set-up ./ocr.sh and ./run_tests.sh run first) compile, with the machine's C++ compiler ($CXX, default g++), each level
of the machine's family: x86-64-v3 (AVX2/FMA), x86-64-v4 (AVX-512) and native (-march=native: this CPU's own) on
x86-64; armv8-a (NEON) and native on aarch64. A level's library is lib/libms_ocr_kernels-<level>.so beside this file
(or in the build tree's copy of the package), with a JSON record of the sources it was built from and the
instruction sets it needs, as /proc/cpuinfo names them (native: the flags of the CPU it was built on). At run time
`pick` takes the best library whose needs the CPU meets: native built on this CPU, then the widest level.

This file imports nothing from ms_ocr: setup.py and scripts/ensure_env.sh run it by its path, before the package's
requirements are installed.

    python ms_ocr/ops/native/libraries.py [--check] [--lib-dir DIR] [--arch MARCH ...]
    python -m ms_ocr.ops.native           (the same, from an installed package)
"""

import argparse
import concurrent.futures
import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LIB_DIR = os.path.join(HERE, "lib")  # where the install builds go
LIB_NAME = "libms_ocr_kernels.so"  # a library built on demand into a cache folder (ms_ocr.ops.native.build)
# -ffp-contract=fast: the kernels' a * b + c on vectors become FMAs where the ISA has them; -fvisibility=hidden: only
# the entry points of kernels.h are exported
FLAGS = ("-O3", "-ffp-contract=fast", "-fopenmp", "-fPIC", "-std=c++17", "-fvisibility=hidden")
LINK_FLAGS = ("-shared", "-fopenmp")
LIBS = ("-ldl",)  # GemmBf16 opens MindSpore's oneDNN at run time
COMPILE_TIMEOUT = 900  # seconds per library (the 2-core test machines are often busy)

# What a library built for each -march needs from a CPU, as /proc/cpuinfo names the instruction sets (abm: LZCNT;
# xsave: the OS state AVX needs), narrowest first: the pick prefers the later of two that run. Native needs the
# flags of the CPU it was built on; any other target is loaded only when MS_OCR_NATIVE_ARCH asks for it.
X86_64_V2 = frozenset({"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"})
X86_64_V3 = X86_64_V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
X86_64_V4 = X86_64_V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
NEEDS = {"x86-64-v2": X86_64_V2, "x86-64-v3": X86_64_V3, "x86-64-v4": X86_64_V4, "armv8-a": frozenset({"asimd"})}
# The levels the install builds besides native, per machine
LEVELS = {"x86_64": ("x86-64-v3", "x86-64-v4"), "aarch64": ("armv8-a",)}
NO_COMPILER = ("no C++ compiler: ms_ocr runs on MindSpore's kernels, slower; install g++ and run {hint} to build "
               "them")
HINT = "python -m ms_ocr.ops.native"


def say(message):
    print(f"[ms_ocr] {message}", file=sys.stderr, flush=True)


# ---- sources ----------------------------------------------------------------------------------------------------

def source_files():
    """The kernels' sources (.cc and .h) beside this file and under arch/, as paths relative to it, sorted."""
    found = []
    for base, dirs, files in os.walk(HERE):
        dirs[:] = sorted(d for d in dirs if d not in ("lib", "__pycache__"))
        found += [os.path.relpath(os.path.join(base, f), HERE) for f in files if f.endswith((".cc", ".h"))]
    return sorted(found)


def compiled_sources():
    """The translation units: every .cc (arch/x86's compile to nothing on other machines)."""
    return [os.path.join(HERE, f) for f in source_files() if f.endswith(".cc")]


def source_digest():
    """What a library is built from: the sources' names and bytes and the flags (not the compiler's version: a
    compiler update leaves installed libraries valid). None where the sources are not shipped."""
    files = source_files()
    if not files:
        return None
    h = hashlib.sha256(" ".join(("unity",) + FLAGS + LINK_FLAGS + LIBS).encode())  # one translation unit
    for f in files:
        h.update(b"\0" + f.encode() + b"\0")
        with open(os.path.join(HERE, f), "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:16]


# ---- the CPU ----------------------------------------------------------------------------------------------------

def _cpuinfo():
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def cpu_flags(info=None):
    """The CPU's instruction-set flags: /proc/cpuinfo's "flags" (x86) or "Features" (Arm) of the first processor."""
    for line in (_cpuinfo() if info is None else info).splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_tag(info=None):
    """What -march=native depends on: the CPU's model lines and its flags."""
    lines = [line for line in (_cpuinfo() if info is None else info).splitlines()
             if line.startswith(("model name", "flags", "Features", "CPU implementer", "CPU part"))]
    return "\n".join(sorted(set(lines))) or platform.processor()


def machine():
    return platform.machine()


def levels(mach=None):
    """The -march targets the install builds on `mach` (default this machine), narrowest first, native last."""
    return list(LEVELS.get(mach or machine(), ())) + ["native"]


def needs(march):
    """The CPU flags a library built for `march` needs (native: this CPU's), or None for a target not in NEEDS."""
    return cpu_flags() if march == "native" else NEEDS.get(march)


# ---- building ---------------------------------------------------------------------------------------------------

def compiler(cxx=None):
    """The C++ compiler's path ($CXX, default g++), or None."""
    return shutil.which(cxx or os.environ.get("CXX", "g++"))


def compiler_version(cxx):
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.splitlines()[0] if out.stdout else cxx


def compile_libraries(targets, cxx, jobs=None):
    """Compile each (output path, -march) of `targets` as one translation unit that includes every source (a unity
    build: the compiler inlines across the kernel families as it did when they were one file, and one compile per
    level takes a third of the time the separate units took here), the targets on a pool of `jobs` processes
    (default: the CPUs this process may use), each written beside its output and renamed into place (a concurrent
    reader never loads a half-written library). Raises subprocess.CalledProcessError (with the compiler's stderr)
    or TimeoutExpired."""
    jobs = jobs or len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="ms_ocr_kernels_") as tmp:
        unity = os.path.join(tmp, "kernels_unity.cc")
        with open(unity, "w") as f:
            f.writelines(f'#include "{src}"\n' for src in compiled_sources())

        def build(path, march):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, partial = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
            os.close(fd)
            try:
                subprocess.run([cxx, f"-march={march}", *FLAGS, *LINK_FLAGS, f"-I{HERE}", unity, "-o", partial,
                                *LIBS], capture_output=True, text=True, timeout=COMPILE_TIMEOUT, check=True)
                os.chmod(partial, 0o755)
                os.replace(partial, path)
            finally:
                if os.path.exists(partial):
                    os.remove(partial)
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            for future in [pool.submit(build, path, march) for path, march in targets]:
                future.result()


def first_error(e):
    """The line of a failed compile that says what failed (the compiler's first error), else its last."""
    lines = (getattr(e, "stderr", None) or str(e)).strip().splitlines() or [type(e).__name__]
    return next((line for line in lines if " error" in line or "error:" in line), lines[-1]).strip()


def library_name(march):
    """A level's file name in the library folder: native's carries a hash of the CPU it is built for."""
    level = "native-" + hashlib.sha256(cpu_tag().encode()).hexdigest()[:10] if march == "native" else march
    return f"libms_ocr_kernels-{level}.so"


def _record_path(path):
    return path[:-3] + ".json"


def records(lib_dir=None):
    """The libraries in `lib_dir` (default LIB_DIR): their JSON records, each with its "path"."""
    lib_dir = lib_dir or LIB_DIR
    found = []
    try:
        names = sorted(os.listdir(lib_dir))
    except OSError:
        return found
    for name in names:
        if not (name.startswith("libms_ocr_kernels-") and name.endswith(".json")):
            continue
        try:
            with open(os.path.join(lib_dir, name)) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            continue
        rec["path"] = os.path.join(lib_dir, name[:-5] + ".so")
        if os.path.isfile(rec["path"]):
            found.append(rec)
    return found


def is_fresh(rec, digest=None):
    """Whether a library was built from the sources beside this file (always, where they are not shipped)."""
    digest = digest or source_digest()
    return digest is None or rec.get("source") == digest


def installed(march, lib_dir=None):
    """The path of the fresh library of `march` in `lib_dir` (native: the one built on this CPU), or None."""
    digest, tag = source_digest(), cpu_tag()
    for rec in records(lib_dir):
        if rec["march"] == march and is_fresh(rec, digest) and (march != "native" or rec.get("cpu") == tag):
            return rec["path"]
    return None


def pick(recs, flags, tag=None, mach=None):
    """The library to load, of `recs` (records), on a `mach` (default this machine) CPU with `flags` (and model
    lines `tag`): native built on this CPU first, then another native build whose CPU's flags this one has, then the
    widest level of NEEDS whose instruction sets it has; None when none runs on it."""
    order = list(NEEDS)

    def rank(rec):
        if rec["march"] == "native":
            return (2, int(rec.get("cpu") == tag))
        return (1, order.index(rec["march"]))
    runs = [rec for rec in recs if rec.get("machine") == (mach or machine()) and rec.get("needs") is not None
            and (rec["march"] == "native" or rec["march"] in NEEDS) and set(rec["needs"]) <= set(flags)]
    return max(runs, key=rank, default=None)


def _write_record(path, march, cxx, digest):
    wants = needs(march)
    rec = {"march": march, "machine": machine(), "needs": None if wants is None else sorted(wants), "source": digest,
           "compiler": compiler_version(cxx), "flags": [f"-march={march}", *FLAGS]}
    if march == "native":
        rec["cpu"] = cpu_tag()
    fd, partial = tempfile.mkstemp(suffix=".json", dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as f:
        json.dump(rec, f, indent=1)
    os.chmod(partial, 0o644)
    os.replace(partial, _record_path(path))


@contextlib.contextmanager
def _locked(lib_dir):
    """One builder at a time per library folder (two first runs of ./ocr.sh at once): a lock on the folder itself,
    so that no lock file ends up in a package."""
    import fcntl
    os.makedirs(lib_dir, exist_ok=True)
    fd = os.open(lib_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def missing(lib_dir=None, marches=None):
    """The targets of `marches` (default: the install levels of this machine) without a fresh library."""
    return [m for m in (marches or levels()) if installed(m, lib_dir) is None]


def install(lib_dir=None, marches=None, cxx=None, reuse=None, hint=HINT):
    """Build the libraries of `marches` (default: this machine's install levels) that `lib_dir` (default LIB_DIR)
    lacks or holds from other sources, copying fresh ones from `reuse` (a folder of built libraries, e.g. the source
    tree's under a `pip install .` of it) instead of compiling them. Says what it compiles on stderr; without a
    compiler says so, in one line, and builds nothing. Returns (the paths of the libraries of `marches` now in
    `lib_dir`, whether every one is there)."""
    lib_dir = lib_dir or LIB_DIR
    marches = list(marches or levels())
    todo = missing(lib_dir, marches)
    if todo:
        with _locked(lib_dir):
            todo = missing(lib_dir, marches)  # another process may have built them meanwhile
            for march in list(todo):
                src = installed(march, reuse) if reuse and os.path.abspath(reuse) != os.path.abspath(lib_dir) else None
                if src:
                    dst = os.path.join(lib_dir, os.path.basename(src))
                    shutil.copy(src, dst + ".partial")
                    os.replace(dst + ".partial", dst)
                    shutil.copy(_record_path(src), _record_path(dst))
                    todo.remove(march)
            cxx_path = compiler(cxx)
            if todo and cxx_path is None:
                say(NO_COMPILER.format(hint=hint))
            elif todo:
                t0 = time.monotonic()
                say(f"building the native CPU kernels ({', '.join(todo)}) with {os.path.basename(cxx_path)} into "
                    f"{lib_dir}")
                targets = [(os.path.join(lib_dir, library_name(m)), m) for m in todo]
                digest = source_digest()
                try:
                    compile_libraries(targets, cxx_path)
                except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
                    say(f"building the native CPU kernels failed ({first_error(e)}): ms_ocr runs on MindSpore's "
                        f"kernels, slower")
                else:
                    for path, march in targets:
                        _write_record(path, march, cxx_path, digest)
                    say(f"built the native CPU kernels in {time.monotonic() - t0:.0f} s")
    paths = [installed(m, lib_dir) for m in marches]
    return [p for p in paths if p], all(paths)


def build_parser():
    p = argparse.ArgumentParser(prog="python -m ms_ocr.ops.native",
                                description="Build the native CPU kernels for this machine's ISA levels (what the "
                                            "install does): only those missing or built from other sources.")
    p.add_argument("--lib-dir", default=LIB_DIR, help="where the libraries go (default: lib/ beside the sources)")
    p.add_argument("--arch", nargs="+", default=None,
                   help=f"-march targets to build (default: {' '.join(levels())})")
    p.add_argument("--check", action="store_true", help="say nothing when they are all built (the set-up's check)")
    p.add_argument("--hint", default=HINT, help=argparse.SUPPRESS)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not missing(args.lib_dir, args.arch):
        if not args.check:
            say(f"the native CPU kernels are built ({', '.join(args.arch or levels())}) in {args.lib_dir}")
        return 0
    _, complete = install(args.lib_dir, args.arch, hint=args.hint)
    return 1 if not complete and compiler() is not None else 0


if __name__ == "__main__":
    sys.exit(main())
