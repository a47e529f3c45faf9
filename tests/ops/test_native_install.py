"""The native kernels are built at install, never by a run: the set-up (scripts/ensure_env.sh, which ./ocr.sh and
./run_tests.sh run first) and setup.py's build step (pip install . / -e .) put one library per ISA level beside the
sources (ms_ocr/ops/native/libraries.py); a second set-up compiles nothing; `infer` runs on the installed library
with no compiler on its PATH; without a compiler the install says so in one line and goes on."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from ms_ocr.ops import native
from ms_ocr.ops.native import libraries
from tests.helpers.native import needs_compiler

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NO_COMPILER = ("[ms_ocr] no C++ compiler: ms_ocr runs on MindSpore's kernels, slower; install g++ and run "
               "{hint} to build them\n")


def _tree(root):
    """A copy of what the set-up and setup.py read: the launchers' scripts, the requirement files, setup.py and the
    kernels' sources (no libraries)."""
    for f in ("setup.py", "requirements.txt", "requirements-test.txt", "scripts/ensure_env.sh"):
        os.makedirs(os.path.dirname(os.path.join(root, f)), exist_ok=True)
        shutil.copy(os.path.join(REPO, f), os.path.join(root, f))
    src = os.path.join(root, "ms_ocr", "ops", "native")
    os.makedirs(src)
    for f in libraries.source_files() + ["libraries.py"]:
        os.makedirs(os.path.dirname(os.path.join(src, f)), exist_ok=True)
        shutil.copy(os.path.join(libraries.HERE, f), os.path.join(src, f))
    return os.path.join(src, "lib")


def _compiler(bin_dir, log, real):
    """g++ and c++ in `bin_dir` that write their arguments to `log`, then run `real` (None: fail, as no compiler
    would)."""
    os.makedirs(bin_dir, exist_ok=True)
    body = f'exec "{real}" "$@"' if real else "exit 127"
    for name in ("g++", "c++"):
        path = os.path.join(bin_dir, name)
        with open(path, "w") as f:
            f.write(f'#!/bin/sh\necho "$@" >> "{log}"\n{body}\n')
        os.chmod(path, 0o755)
    return os.path.join(bin_dir, "g++")


def _calls(log):
    return open(log).read().splitlines() if os.path.exists(log) else []


def _venv(root):
    """A stand-in for the set-up's virtualenv: this Python (libraries.py needs only the standard library) and the
    stamp that says the runtime requirements are installed, so the set-up runs no pip."""
    venv = os.path.join(root, "venv")
    os.makedirs(os.path.join(venv, "bin"))
    os.symlink(sys.executable, os.path.join(venv, "bin", "python"))
    stamp = subprocess.run(f"cat {REPO}/requirements.txt | sha1sum | cut -c1-12", shell=True, capture_output=True,
                           text=True, check=True).stdout.strip()
    open(os.path.join(venv, f".ms_ocr_runtime_{stamp}"), "w").close()
    return venv


def _installed_here():
    """The fresh libraries of this tree's install, by -march (the set-up built them; else the test skips)."""
    found = {m: libraries.installed(m) for m in libraries.levels()}
    if not all(found.values()):
        pytest.skip(f"the install's libraries are not built in {native.LIB_DIR} (scripts/ensure_env.sh builds them)")
    return found


@needs_compiler
def test_set_up_builds_the_missing_level_and_then_compiles_nothing(tmp_path):
    """The set-up compiles what the library folder lacks (here one level; the others copied from this tree's
    install), with the machine's compiler, and a second set-up runs no compiler and says nothing."""
    found = _installed_here()
    lib_dir = _tree(str(tmp_path / "repo"))
    os.makedirs(lib_dir)
    first, *others = libraries.levels()
    for march in others:
        for path in (found[march], found[march][:-3] + ".json"):
            shutil.copy(path, lib_dir)
    log = str(tmp_path / "calls.log")
    cxx = _compiler(str(tmp_path / "bin"), log, shutil.which(os.environ.get("CXX", "g++")))
    env = dict(os.environ, MS_OCR_VENV=_venv(str(tmp_path)), CXX=cxx)
    script = str(tmp_path / "repo" / "scripts" / "ensure_env.sh")
    proc = subprocess.run([script, "runtime"], capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    assert f"building the native CPU kernels ({first})" in proc.stderr and "built the native" in proc.stderr
    compiles = [c for c in _calls(log) if "kernels_unity.cc" in c]
    assert compiles and all(f"-march={first}" in c for c in compiles)
    assert len(compiles) == 1  # one translation unit including every source (libraries.compile_libraries)
    recs = libraries.records(lib_dir)
    assert sorted(r["march"] for r in recs) == sorted(libraries.levels())
    assert all(r["source"] == libraries.source_digest() for r in recs)
    before = _calls(log)
    again = subprocess.run([script, "runtime"], capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0 and again.stderr == "" and _calls(log) == before


@needs_compiler
def test_setup_py_build_puts_the_libraries_in_the_package(tmp_path):
    """setup.py's build step (what pip install . runs) puts every level's library and record into the built package;
    the ones this source tree's set-up built are copied, not compiled again."""
    found = _installed_here()
    log = str(tmp_path / "calls.log")
    cxx = _compiler(str(tmp_path / "bin"), log, shutil.which(os.environ.get("CXX", "g++")))
    build_lib = tmp_path / "build"
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "-b", str(build_lib), "-t",
                           str(tmp_path / "tmp")], cwd=REPO, capture_output=True, text=True, timeout=1800,
                          env=dict(os.environ, CXX=cxx))
    assert proc.returncode == 0, proc.stderr
    built = libraries.records(str(build_lib / "ms_ocr" / "ops" / "native" / "lib"))
    assert sorted(os.path.basename(r["path"]) for r in built) == sorted(os.path.basename(p) for p in found.values())
    assert not [c for c in _calls(log) if "kernels_unity.cc" in c]


def test_no_compiler_at_install_is_one_line(tmp_path):
    """Without a compiler, the set-up, setup.py's build step and `python -m ms_ocr.ops.native` each say so in one
    line (no traceback), build nothing and succeed: ms_ocr then runs on MindSpore's kernels (and says so when it
    loads, test_native.py)."""
    lib_dir = _tree(str(tmp_path / "repo"))
    log = str(tmp_path / "calls.log")
    _compiler(str(tmp_path / "bin"), log, None)
    no_cxx = str(tmp_path / "bin" / "no-such-compiler")
    env = dict(os.environ, MS_OCR_VENV=_venv(str(tmp_path)), CXX=no_cxx)
    proc = subprocess.run([str(tmp_path / "repo" / "scripts" / "ensure_env.sh"), "runtime"], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == env["MS_OCR_VENV"]
    assert proc.stderr == NO_COMPILER.format(hint="./ocr.sh (or ./run_tests.sh) again")
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "-b", str(tmp_path / "build"), "-t",
                           str(tmp_path / "tmp")], cwd=str(tmp_path / "repo"), capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stderr.splitlines() if "[ms_ocr]" in line or "Traceback" in line] == \
        [NO_COMPILER.format(hint=libraries.HINT).strip()]
    proc = subprocess.run([sys.executable, os.path.join(os.path.dirname(lib_dir), "libraries.py")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and proc.stderr == NO_COMPILER.format(hint=libraries.HINT)
    assert libraries.records(lib_dir) == [] and libraries.records(str(tmp_path / "build")) == []
    assert _calls(log) == []


RUN = """
import json, sys
from ms_ocr.infer import main
from ms_ocr.ops import native
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
assert not code, code
k = native.load()
print(json.dumps(None if k is None else {"path": k.path, "march": k.march, "isa": k.isa_level,
                                         "calls": k.decode_layer_calls + k.attention_calls + k.matmul_t_calls}))
"""


@pytest.mark.gate
@needs_compiler
def test_a_run_compiles_nothing(tmp_path):
    """`infer` on the demo checkpoint with no compiler on its PATH ($CXX and g++ fail, and log any call) runs on the
    installed native kernels: it loads this CPU's library from the install and its kernels compute the answer."""
    found = _installed_here()
    log = str(tmp_path / "calls.log")
    bin_dir = str(tmp_path / "bin")
    cxx = _compiler(bin_dir, log, None)
    env = {k: v for k, v in os.environ.items() if k not in (native.ARCH_ENV, native.ENV_SWITCH)}
    env.update(PATH=bin_dir, CXX=cxx, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", RUN, "--model-path", os.path.join(REPO, "ms_ocr", "demo",
                                                                                    "paddleocr_vl"),
                           "--image", os.path.join(REPO, "examples", "note.png"), "--device", "cpu"],
                          cwd=str(tmp_path), capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got is not None, proc.stderr
    best = libraries.pick([r for r in libraries.records() if libraries.is_fresh(r)], libraries.cpu_flags(),
                          libraries.cpu_tag())
    assert got["path"] == best["path"] and got["path"] in found.values() and got["calls"] > 0
    assert "unavailable" not in proc.stderr and _calls(log) == []
