import numpy as np

from bench.real_size import randomize_  # noqa: F401 - the tests' name for it


def rel_err(got, want):
    """max |got - want| / max |want| — the parity measure (tolerance 1e-4 at fp32)."""
    return float(np.abs(np.asarray(got) - np.asarray(want)).max() / np.abs(np.asarray(want)).max())
