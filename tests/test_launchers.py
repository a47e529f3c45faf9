"""The shell launchers' allocator choice (scripts/jemalloc.sh, sourced by ocr.sh and run_tests.sh): jemalloc goes
under the process where ldconfig lists a copy the loader takes, once, ahead of what LD_PRELOAD held;
MS_OCR_JEMALLOC=0 or a system without it leaves LD_PRELOAD as it was."""

import os
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "scripts", "jemalloc.sh")


def _loaded_libm():
    """The path of the libm this Python runs with: a real shared library the loader can preload."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "/libm.so" in line or "/libm-" in line}
    assert paths, "no libm mapped"
    return sorted(paths)[0]


@pytest.fixture
def fake_system(tmp_path):
    """A PATH whose ldconfig lists (or not) a libjemalloc.so.2 the loader takes (a copy of libm under that name),
    after one it refuses (an empty file, as another architecture's copy would be)."""
    good = tmp_path / "good" / "libjemalloc.so.2"
    bad = tmp_path / "bad" / "libjemalloc.so.2"
    good.parent.mkdir()
    bad.parent.mkdir()
    shutil.copy(_loaded_libm(), good)
    bad.write_bytes(b"")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def make(listed):
        listing = "\tlibc.so.6 (libc6,x86-64) => /lib/libc.so.6\n"
        if listed:
            listing += f"\tlibjemalloc.so.2 (libc6) => {bad}\n\tlibjemalloc.so.2 (libc6,x86-64) => {good}\n"
        (bin_dir / "ldconfig").write_text("#!/bin/sh\ncat <<'EOF'\n" + listing + "EOF\n")
        (bin_dir / "ldconfig").chmod(0o755)
        return str(good)
    return make, str(bin_dir)


def _preload(bin_dir, before=None, times=1, **env):
    e = {"PATH": bin_dir + os.pathsep + os.environ["PATH"], **env}
    if before is not None:
        e["LD_PRELOAD"] = before
    script = (f'set -euo pipefail\nsource "{SCRIPT}"\n' + "ms_ocr_preload_jemalloc\n" * times
              + 'printf "%s" "${LD_PRELOAD-<unset>}"\n')
    proc = subprocess.run(["bash", "-c", script], env=e, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_listed_jemalloc_the_loader_takes_goes_first_and_once(fake_system):
    make, bin_dir = fake_system
    lib = make(listed=True)
    assert _preload(bin_dir) == lib
    assert _preload(bin_dir, before="/opt/other.so", times=2) == f"{lib}:/opt/other.so"


def test_switched_off_or_absent_leaves_ld_preload_alone(fake_system):
    make, bin_dir = fake_system
    make(listed=True)
    assert _preload(bin_dir, MS_OCR_JEMALLOC="0") == "<unset>"
    make(listed=False)
    assert _preload(bin_dir) == "<unset>"
    assert _preload(bin_dir, before="/opt/other.so") == "/opt/other.so"


@pytest.mark.parametrize("launcher", ["ocr.sh", "run_tests.sh"])
def test_launchers_preload_it_before_starting_python(launcher):
    lines = open(os.path.join(REPO, launcher)).read().splitlines()
    src = [i for i, line in enumerate(lines) if line.startswith('source "$repo/scripts/jemalloc.sh"')]
    call = [i for i, line in enumerate(lines) if line.startswith("ms_ocr_preload_jemalloc")]
    start = [i for i, line in enumerate(lines) if "exec " in line and "python" in line]
    assert len(src) == 1 and len(call) == 1 and start and src[0] < call[0] < start[-1]


def test_set_up_installs_it_where_the_loader_finds_none(fake_system):
    """scripts/ensure_env.sh asks the same question as the launchers: a refused copy alone is no jemalloc."""
    make, bin_dir = fake_system
    good = make(listed=True)
    script = f'set -euo pipefail\nsource "{SCRIPT}"\nprintf "[%s]" "$(ms_ocr_jemalloc)"\n'
    env = {"PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    run = lambda: subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)  # noqa: E731
    assert run().stdout == f"[{good}]"
    make(listed=False)
    assert run().stdout == "[]"


def test_the_demo_fonts_ship_with_the_repository():
    """The demo gates skipped where Debian's font packages were missing, and a run with them skipped was green.
    The eleven fonts now ship in training/demo/font_files/ (with their licences) and are found there first, so
    the gates run on every machine, whatever fonts it has; the set-up installs no font package."""
    from training.demo import fonts as data
    for name in data.TRAIN_FONTS + data.UNSEEN_FONTS:
        assert data.font_path(name) == os.path.join(data.BUNDLED, name)
        assert os.path.getsize(data.font_path(name)) > 100_000
    for licence in ("LICENSE-DejaVu.txt", "LICENSE-Liberation.txt"):
        assert os.path.getsize(os.path.join(data.BUNDLED, licence)) > 1000
    assert data.missing_fonts() == [] and data.missing_font_packages() == ""
    setup = open(os.path.join(REPO, "scripts", "ensure_env.sh")).read()
    assert "training.demo.fonts" not in setup
    assert not any(package in setup for package in data.FONT_PACKAGES.split())