"""Checkpoint-layout matrix of unlimited-ocr (the variants: tests/matrix/models.py; the tests: tests/matrix/suite.py)."""

from tests.matrix.suite import *  # noqa: F401,F403

MODEL = "unlimited-ocr"
