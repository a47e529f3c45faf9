"""Graph export: MindIR (the vision encoder and the text graph, served by `infer --mindir`) and the vision encoder
to ONNX; ms_ocr/export/mindir.py. `python -m ms_ocr.export` is the command line. Importing this package is light:
the names below load mindir.py (and MindSpore) on first use, so the command line sets MindSpore's log level first."""

import importlib


def __getattr__(name):
    if name.startswith("__"):  # module machinery (__path__, __file__, ...) never comes from mindir.py
        raise AttributeError(name)
    mindir = importlib.import_module("ms_ocr.export.mindir")
    try:
        return getattr(mindir, name)
    except AttributeError:
        raise AttributeError(f"module 'ms_ocr.export' has no attribute {name!r}") from None
