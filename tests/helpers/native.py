"""Markers for the tests of the native CPU kernels (ms_ocr/ops/native)."""

import os
import platform
import shutil

import pytest

needs_compiler = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None,
                                    reason="no C++ compiler on this machine")
needs_x86 = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64-v2 is an x86 target")
