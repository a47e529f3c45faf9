#!/usr/bin/env bash
# Run the test suite, installing the test requirements on first use. Extra arguments go to pytest
# (e.g. ./run_tests.sh -m slow for the full-size tests). Test files run in MS_OCR_TEST_WORKERS processes
# (default: one per core, at most 2; 1 runs them in this process; the full-size tests, which take most of the
# memory each, always run one at a time). Each worker keeps its own share of the cores, with the command lines it
# starts, until its siblings finish (tests/conftest.py; MS_OCR_TEST_PIN=0 leaves them unpinned).
set -euo pipefail
repo=$(cd "$(dirname "$0")" && pwd)
venv=$("$repo/scripts/ensure_env.sh" test)
cd "$repo"
workers=${MS_OCR_TEST_WORKERS:-$(( $(nproc) < 2 ? 1 : 2 ))}
case " $* " in *slow*) workers=1 ;; esac
par=()
[ "$workers" -gt 1 ] && par=(-n "$workers" --dist loadfile --no-loadscope-reorder)  # order: tests/conftest.py
# The test install leaves bytecode to first import (scripts/ensure_env.sh): let Python write it, so each module
# compiles once, not in every test process.
unset PYTHONDONTWRITEBYTECODE
# jemalloc under the test processes and the command-line children they start, where it is installed (the test
# set-up installs Debian's libjemalloc2 as root); MS_OCR_JEMALLOC=0 runs them on glibc's malloc.
source "$repo/scripts/jemalloc.sh"
ms_ocr_preload_jemalloc
MS_OCR_OFFLINE=1 GLOG_v=3 exec "$venv/bin/python" -m pytest -q "${par[@]}" "$@"
