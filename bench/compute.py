"""The prefill's compute bound: the arithmetic a prompt's prefill must do, and the rate the machine's fp32 products
reach with the run's threads.

A prefill of N prompt tokens multiplies every decoder matrix by N rows (2 N flops a weight; of an MoE layer's routed
experts, the top-k of n a token uses), attends causally (per layer 2 * 2 * heads * head_dim * N (N + 1) / 2 flops: the
scores and the weighted values), and runs the head on the last row. ms_ocr's exact prefill multiplies in fp32 with
MindSpore's MatMul on the CPU, so at that kernel's rate on a large product (measured here in a graph, as prefill runs
it) the prefill cannot take less than flops / rate. Vision is not counted; norms, rope and softmax are left out (a few
per cent of the flops), so the bound is a floor, not an estimate."""

import time

import numpy as np

PROBE_SHAPE = (1024, 1024, 4096)  # rows x in x out: a prefill product of a 1,000-token prompt


def product_gflops(threads, shape=PROBE_SHAPE, rounds=5):
    """GFLOP/s (1e9) of the best of `rounds` fp32 products x [M, K] times w [N, K]^T by MindSpore's MatMul on the CPU
    in graph mode with `threads` (ms_ocr.device.setup's threads, as the CLI sets them)."""
    from mindspore import Tensor, nn, ops
    from ms_ocr import device
    device.setup("cpu", threads)

    class Product(nn.Cell):
        def __init__(self):
            super().__init__()
            self.mm = ops.MatMul(transpose_b=True)

        def construct(self, x, w):
            return self.mm(x, w)

    m, k, n = shape
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((m, k), np.float32))
    w = Tensor(rng.standard_normal((n, k), np.float32))
    cell = Product()
    want = x.asnumpy()[:4] @ w.asnumpy()[:8].T
    got = cell(x, w).asnumpy()  # compiled here, untimed
    if not np.allclose(got[:4, :8], want, rtol=1e-4, atol=1e-3):
        raise RuntimeError("the product probe computed something else")
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        cell(x, w).asnumpy()
        best = min(best, time.perf_counter() - t0)
    return 2 * m * k * n / best / 1e9


def prefill_flops(config, tensors, tokens):
    """Flops of a prefill of `tokens` prompt tokens (see the module's docstring): config is the checkpoint's config
    (its text part is found), tensors bench.memory.text_tensors' {name: (dtype, elements)}."""
    text = config.get("text_config") or config.get("language_config") or config
    share = text["num_experts_per_tok"] / text["n_routed_experts"] if text.get("n_routed_experts") else 1.0
    rows = 0.0  # weights every prompt row is multiplied by
    head = 0
    for name, (_, n) in tensors.items():
        if "norm" in name or name.endswith(".bias") or "embed_tokens" in name:
            continue
        if name.endswith("lm_head.weight"):
            head = n
        elif ".layers." in name:
            rows += n * (share if ".mlp.experts." in name else 1.0)
    if not head:  # a tied head: the embedding table
        head = next((n for name, (_, n) in tensors.items() if name.endswith("embed_tokens.weight")), 0)
    layers, heads = text["num_hidden_layers"], text["num_attention_heads"]
    head_dim = text.get("head_dim") or text["hidden_size"] // heads
    attention = 2 * 2 * layers * heads * head_dim * tokens * (tokens + 1) / 2
    return 2 * tokens * rows + attention + 2 * head
