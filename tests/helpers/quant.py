"""Weight-only int8 in the tests: the dequantised values a quantised matrix stands for."""

import numpy as np


def dequantized(q, scale):
    """float64 q * scale, scale [N] (per row) or [N, K / G] (per group of G columns)"""
    s = scale.astype(np.float64)
    return q.astype(np.float64) * (s[:, None] if s.ndim == 1 else np.repeat(s, q.shape[1] // s.shape[1], 1))


def quantized_params(net):
    """{name: Parameter} of every int8 matrix of a loaded `net` and {name: Parameter} of all its parameters."""
    params = {p.name: p for p in net.get_parameters()}
    return {n: p for n, p in params.items() if str(p.dtype) == "Int8"}, params


def write_dequantised_copy(net, spec, folder, dst):
    """Copy the checkpoint `folder` to `dst` with every weight that `net` (loaded from it by `spec`, the model's
    ms_ocr spec, with a --quantize mode) holds in int8 replaced by its dequantised values in fp32 (each q * scale
    rounded once, as DequantQ8's; bf16 would round them again). Returns the int8 matrices' local names; every one
    must be found in the checkpoint (an expert of a stacked matrix under its own name)."""
    import os
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from ms_ocr.convert.safetensors_io import weight_files
    quantized, params = quantized_params(net)
    ours = spec.name_table(spec.config_from_dir(folder))
    shutil.copytree(folder, dst)
    written = set()
    for path in weight_files(str(dst)):
        state = load_file(path)
        for name in list(state):
            local = ours(name)
            local, index = local if isinstance(local, tuple) else (local, None)  # an expert of a stack
            if local in quantized:
                q, s = quantized[local].asnumpy(), params[f"{local}_scale"].asnumpy()
                if index is not None:
                    q, s = q[index], s[index]
                state[name] = torch.tensor(dequantized(q, s).astype(np.float32))
                written.add(local)
        os.remove(path)
        save_file(state, path, metadata={"format": "pt"})
    assert written == set(quantized), sorted(set(quantized) - written)
    return sorted(quantized)
