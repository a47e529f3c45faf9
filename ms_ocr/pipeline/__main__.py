import sys

from ms_ocr.pipeline.cli import main

sys.exit(main())
