"""Offline batch OCR; the same as python -m ms_ocr.batch (see its --help)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ms_ocr.batch.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
