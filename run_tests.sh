#!/usr/bin/env bash
# Run the test suite, installing the test requirements on first use. Extra arguments go to pytest
# (e.g. ./run_tests.sh -m slow for the full-size tests).
set -euo pipefail
repo=$(cd "$(dirname "$0")" && pwd)
venv=$("$repo/scripts/ensure_env.sh" test)
cd "$repo"
MS_OCR_OFFLINE=1 GLOG_v=3 exec "$venv/bin/python" -m pytest -q "$@"
