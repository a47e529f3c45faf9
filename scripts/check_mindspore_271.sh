#!/usr/bin/env bash
# One-off compatibility check: the tiny test suite on MindSpore 2.7.1 (the release paired with CANN 8.3.RC1),
# in its own venv (MS_OCR_VENV_271, default ~/.cache/ms_ocr/venv-ms271). Not part of CI (it installs a
# second 2.5 GB MindSpore wheel).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${MS_OCR_VENV_271:-$HOME/.cache/ms_ocr/venv-ms271}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
fi
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q "mindspore==2.7.1" -r "$repo/requirements.txt" -r "$repo/requirements-test.txt"
"$venv/bin/python" -c "import mindspore; print('mindspore', mindspore.__version__)"
cd "$repo"
MS_OCR_OFFLINE=1 GLOG_v=3 "$venv/bin/python" -m pytest -q "$@"
