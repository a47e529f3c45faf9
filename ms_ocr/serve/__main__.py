import sys

from ms_ocr.serve.cli import main

sys.exit(main())
