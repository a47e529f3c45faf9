import numpy as np


def rel_err(got, want):
    """max |got - want| / max |want| — the parity measure (tolerance 1e-4 at fp32)."""
    return float(np.abs(np.asarray(got) - np.asarray(want)).max() / np.abs(np.asarray(want)).max())


def randomize_(model, seed, vectors=None):
    """Refill a reference model's weights, in parameter-name order from `seed`: matrices ~ N(0, 0.2) (conv
    kernels N(0, 0.05)), biases ~ N(0, 0.1), norm weights ~ 1 + N(0, 0.1); `vectors(name)` may give another
    std for a 1-D parameter (e.g. learned embedding rows). Larger than the init std so logits are O(1..10)
    and greedy tokens are decisive."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            noise = torch.randn(param.shape, generator=gen)
            std = vectors(name) if vectors and param.ndim == 1 else None
            if param.ndim == 4:
                param.copy_(noise * 0.05)
            elif param.ndim >= 2:
                param.copy_(noise * 0.2)
            elif std is not None:
                param.copy_(noise * std)
            elif name.endswith("bias"):
                param.copy_(noise * 0.1)
            else:
                param.copy_(1 + noise * 0.1)
    return model

