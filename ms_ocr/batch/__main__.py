import sys

from ms_ocr.batch.cli import main

sys.exit(main())
