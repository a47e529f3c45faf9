"""python -m ms_ocr.ops.native: build the native CPU kernels for this machine's ISA levels (libraries.py)."""

import sys

from ms_ocr.ops.native.libraries import build_parser, main  # noqa: F401 (build_parser: tests/test_readme.py)

if __name__ == "__main__":
    sys.exit(main())
