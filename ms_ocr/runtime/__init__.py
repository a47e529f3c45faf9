"""Runs a loaded VLM Cell on MindSpore, one module per responsibility (each behind a small interface):
- core.py     VLMRuntime: the engine's interface (interfaces.Runtime: encode, plan/reset the cache, prefill, decode)
- decode.py   DecodeStep: the decode step, the number of sequence rows a parameter of each call
- host_step.py  HostStep: the same step's native kernels called from the host (CPU, dense decoders)
- kvcache.py  KVCache: the decoder layers' caches, written by the host (HostKVCache: the CPU) or in the graphs
              (GraphKVCache: Ascend, export)
- moe.py      HostMoE: MoE layers with the experts routed on the host (CPU), with its step graphs
- vision.py   VisionEncoder: images through the vision tower (packed ViT layers, or the model's own views)
- inputs.py   what the host side hands over (Buckets, VisionInputs, Prepared), free of MindSpore
The compile machinery (compiled-graph bookkeeping and the persistent cache) is ms_ocr/compiler.py and
compile_cache.py; how the runtime computes (dtypes, kernels) is its plan's (ms_ocr/plan.py).

Importing this package imports MindSpore only when a runtime name that needs it is first used."""

import importlib

from ms_ocr.runtime.inputs import Buckets, Prepared, RequestTooLong, VisionInputs

_LAZY = {"VLMRuntime": "core", "host_tensor": "tensors", "padded_rows": "tensors", "release_weights": "tensors",
         "VisionEncoder": "vision", "KVCache": "kvcache", "HostKVCache": "kvcache", "GraphKVCache": "kvcache",
         "DecodeStep": "decode", "HostMoE": "moe"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"ms_ocr.runtime.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'ms_ocr.runtime' has no attribute {name!r}")


__all__ = ["Buckets", "Prepared", "RequestTooLong", "VisionInputs", *_LAZY]
