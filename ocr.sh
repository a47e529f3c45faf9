#!/usr/bin/env bash
# OCR an image, installing what ms_ocr needs on first use:
#   ./ocr.sh --model paddleocr-vl --image page.png [--model-path DIR] [--task ocr|table|formula|chart]
set -euo pipefail
repo=$(cd "$(dirname "$0")" && pwd)
venv=$("$repo/scripts/ensure_env.sh" runtime)
PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" exec "$venv/bin/python" -m ms_ocr.infer "$@"
