"""One-line messages for failures that reach the command line."""

from ms_ocr.config_utils import CheckpointError


class UsageError(ValueError):
    """Input a command cannot use as given (an input, a manifest, an output folder): one line, exit status 2."""


def user_error_message(exc):
    """A single line: known error types speak for themselves, others are named by type."""
    text = " ".join(str(exc).split()) or exc.__class__.__name__
    known = (CheckpointError, ValueError, FileNotFoundError, PermissionError, MemoryError)
    if isinstance(exc, known):
        return text
    if isinstance(exc, OSError):
        return f"I/O error: {text}"
    return f"{exc.__class__.__name__}: {text}"
