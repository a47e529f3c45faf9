"""Tests that render text in the demo data's fonts (training/demo/fonts.py) skip where any is missing, naming the
packages to install."""

import pytest

from training.demo.fonts import FONT_PACKAGES, missing_fonts

_MISSING = missing_fonts()
needs_fonts = pytest.mark.skipif(bool(_MISSING), reason=f"fonts missing: {_MISSING}; apt-get install {FONT_PACKAGES}")
