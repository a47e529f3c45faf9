"""Runs a loaded VLM Cell on MindSpore, split by responsibility (each module behind a small interface):
- core.py     VLMRuntime: the engine's interface (encode, plan/reset the cache, prefill, decode) over the others
- vision.py   VisionEncoder: images through the vision tower (packed ViT layers, or the model's own views)
- kvcache.py  KVCache: the decoder layers' caches, written by the host (CPU) or in the graphs (Ascend, export)
- moe.py      HostMoE: MoE layers with the experts routed on the host (CPU)
- inputs.py   what the host side hands over (Buckets, VisionInputs, Prepared), free of MindSpore
The compile machinery (compiled-graph bookkeeping and the persistent cache) is ms_ocr/compiler.py.

Importing this package imports MindSpore only when a runtime name that needs it is first used."""

import importlib

from ms_ocr.runtime.inputs import Buckets, Prepared, RequestTooLong, VisionInputs

_LAZY = {"VLMRuntime": "core", "host_tensor": "tensors", "padded_rows": "tensors", "release_weights": "tensors",
         "VisionEncoder": "vision", "KVCache": "kvcache", "HostMoE": "moe"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"ms_ocr.runtime.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'ms_ocr.runtime' has no attribute {name!r}")


__all__ = ["Buckets", "Prepared", "RequestTooLong", "VisionInputs", *_LAZY]
