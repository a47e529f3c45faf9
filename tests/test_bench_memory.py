"""The decode bound's two halves (bench/memory.py): the read probe of the native kernels' team, and the bytes a step
reads."""

import numpy as np
import pytest

from bench.memory import bound_ms, kv_bytes_per_token, read_bandwidth_gbs, step_bytes
from ms_ocr.ops import native


def test_read_probe_sums_every_value_once_on_each_team_size():
    kernels = native.load()
    assert kernels is not None, "the native kernels are built by the test set-up"
    values = (np.arange(64 * 1001) % 7).astype(np.float32)  # exact sums: small integers
    for threads in (1, 2, 3):
        kernels.set_threads(threads)
        assert kernels.read_sum(values) == float(values.sum(dtype=np.float64))
    kernels.set_threads(2)
    with pytest.raises(ValueError, match="multiple of 64"):
        kernels.read_sum(np.ones(100, np.float32))
    with pytest.raises(ValueError, match="float32"):
        kernels.read_sum(np.ones(128, np.float64))


def test_read_bandwidth_is_a_rate_over_the_bytes_read():
    gbs = read_bandwidth_gbs(2, nbytes=64 << 20, rounds=2)
    assert 0.5 < gbs < 2000  # any machine's memory or cache: a rate, not a time or a byte count


def test_kv_bytes_per_token_and_the_step_bound():
    # PaddleOCR-VL 0.9B's text config: 18 layers, 2 KV heads of 128
    text = {"num_hidden_layers": 18, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 128,
            "hidden_size": 1024}
    assert kv_bytes_per_token(text) == 36864
    assert kv_bytes_per_token({"text_config": text}, kv_bytes=2) == 18432
    no_head_dim = {"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 512}  # MHA, 64 a head
    assert kv_bytes_per_token(no_head_dim) == 2 * 2 * 8 * 64 * 4
    nbytes = step_bytes(721e6, 36864, 1000)
    assert nbytes == 721e6 + 36.864e6
    assert bound_ms(nbytes, 20.0) == pytest.approx(37.8932)
