#!/usr/bin/env bash
# Create (once) the virtualenv ms_ocr runs in, install its requirements and build the native CPU kernels; prints the
# venv path.
#   scripts/ensure_env.sh runtime|test
# The venv lives outside the clone (MS_OCR_VENV, default ~/.cache/ms_ocr/venv) so fresh clones and CI
# reuse it; a stamp of the requirement files decides whether pip needs to run again.
set -euo pipefail
kind=${1:-runtime}
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${MS_OCR_VENV:-$HOME/.cache/ms_ocr/venv}
py=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  echo "[ms_ocr] creating virtualenv $venv" >&2
  "$py" -m venv "$venv" >&2
  "$venv/bin/pip" install -q --upgrade pip >&2
fi
files="$repo/requirements.txt"
[ "$kind" = test ] && files="$files $repo/requirements-test.txt"
stamp="$venv/.ms_ocr_${kind}_$(cat $files | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "[ms_ocr] installing $kind requirements into $venv (first run takes a few minutes)" >&2
  args="-r $repo/requirements.txt"
  # The test set-up skips pip's byte-compiling of every installed module (60 of its 121 s here, 2026-11-28):
  # run_tests.sh lets Python write the bytecode of the modules the tests import as they first import them (~20 s).
  compile=""
  [ "$kind" = test ] && compile="--no-compile"
  # torch comes from the local CPU wheel; ask for it alone first so pip never reaches for a CUDA build.
  [ "$kind" = test ] && "$venv/bin/pip" install -q $compile torch==2.13.0 >&2
  [ "$kind" = test ] && args="$args -r $repo/requirements-test.txt"
  "$venv/bin/pip" install -q $compile $args >&2
  touch "$stamp"
fi
# The native CPU kernels, one library per ISA level (ms_ocr/ops/native/libraries.py): compiled here, at the set-up,
# where they are missing or were built from other sources, so that no run compiles them (a few milliseconds when they
# are all there). Without a C++ compiler this says so in one line and ms_ocr runs on MindSpore's kernels.
"$venv/bin/python" "$repo/ms_ocr/ops/native/libraries.py" --check --hint "./ocr.sh (or ./run_tests.sh) again" >&2 \
  || true
# System packages some tests need, installed where this runs as root with apt-get (otherwise those tests skip and
# name the packages; under CI=true a skipped gate fails the run, tests/conftest.py): the aarch64 (NEON) build of the native kernels is checked under qemu-user with the cross
# compiler (tests/ops/test_native_isa.py); jemalloc, which run_tests.sh puts under the test processes (MindSpore's
# graph compiler allocates a lot: 5-27 % less time on the files measured, docs/journal/benchmarks.md "Test suite";
# without it the tests run on glibc's malloc, slower; "installed" as the launchers see it, scripts/jemalloc.sh);
# Debian's chromium, the browser tests/serve/test_page.py drives through Playwright (which fails, naming it, without it). One
# package index update; each set installs (or fails) alone.
if [ "$kind" = test ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  cross=""
  { command -v aarch64-linux-gnu-g++ && command -v qemu-aarch64; } >/dev/null || cross="g++-aarch64-linux-gnu qemu-user"
  alloc=""
  source "$repo/scripts/jemalloc.sh"
  [ -n "$(ms_ocr_jemalloc)" ] || alloc="libjemalloc2"
  browser=""
  [ -x /usr/bin/chromium ] || browser="chromium"
  if [ -n "$cross$alloc$browser" ]; then
    echo "[ms_ocr] installing for the aarch64 kernel tests, the tests' allocator and the page tests (apt-get):" \
      $cross $alloc $browser >&2
    if apt-get update -qq >&2; then
      [ -z "$browser" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $browser >&2 \
        || echo "[ms_ocr] chromium install failed; the page tests will fail naming it" >&2
      [ -z "$cross" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $cross >&2 \
        || echo "[ms_ocr] aarch64 tools install failed; the aarch64 kernel test will skip" >&2
      [ -z "$alloc" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $alloc >&2 \
        || echo "[ms_ocr] jemalloc install failed; the tests run on glibc's malloc (slower)" >&2
    else
      echo "[ms_ocr] apt-get update failed; the aarch64 kernel tests will skip" >&2
      [ -z "$alloc" ] || echo "[ms_ocr] (and the tests run on glibc's malloc, slower)" >&2
      [ -z "$browser" ] || echo "[ms_ocr] (and the page tests fail: no chromium)" >&2
    fi
  fi
fi
echo "$venv"
