#!/usr/bin/env bash
# OCR an image, installing what ms_ocr needs on first use:
#   ./ocr.sh --model paddleocr-vl --image page.png [--model-path DIR] [--task ocr|table|formula|chart]
#   ./ocr.sh pipeline --image page.png --out DIR    (document parsing: layout + regions -> Markdown/JSON)
#   ./ocr.sh batch --model paddleocr-vl --input DIR --out DIR   (offline batch runner)
#   ./ocr.sh serve --model paddleocr-vl [--port 8000]   (OpenAI-compatible server, docs/serving.md)
set -euo pipefail
repo=$(cd "$(dirname "$0")" && pwd)
venv=$("$repo/scripts/ensure_env.sh" runtime)
module=ms_ocr.infer
case "${1:-}" in
  pipeline) module=ms_ocr.pipeline; shift ;;
  batch) module=ms_ocr.batch; shift ;;
  serve) module=ms_ocr.serve; shift ;;
esac
source "$repo/scripts/jemalloc.sh"
ms_ocr_preload_jemalloc  # where installed: shorter decode steps (MS_OCR_JEMALLOC=0: glibc's malloc)
PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" exec "$venv/bin/python" -m "$module" "$@"
