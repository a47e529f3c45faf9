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


def test_checkpoint_weight_format_goes_by_the_bytes_of_the_decoder_layers(tmp_path):
    """DeepSeek-OCR-2 as transformers saves it: bf16 layers with fp32 MoE router gates (which came first in its
    header and made the benchmark count the exact path's weights as fp32: a bound of 2,437 MB a step instead of
    1,289); the vision tower's tensors do not count."""
    from bench.memory import checkpoint_weight_format
    from ms_ocr.convert.safetensors_io import save_file
    bf16 = (np.zeros((64, 64), np.float32), "BF16")  # stored as bf16
    tensors = {"model.layers.1.mlp.gate.weight": np.zeros((8, 64), np.float32),
               "model.layers.1.mlp.experts.0.up_proj.weight": bf16, "model.layers.0.self_attn.q_proj.weight": bf16,
               "model.qwen2_model.model.layers.0.mlp.up_proj.weight": np.zeros((256, 256), np.float32)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    assert checkpoint_weight_format(str(tmp_path)) == "bf16"
    save_file({"model.layers.0.self_attn.q_proj.weight": np.zeros((64, 64), np.float32),
               "model.layers.0.input_layernorm.weight": (np.zeros(64, np.float32), "BF16")},
              str(tmp_path / "model.safetensors"))
    assert checkpoint_weight_format(str(tmp_path)) == "fp32"


def test_decode_weight_bytes_counts_text_layers_head_once_and_the_experts_a_token_reads(tmp_path):
    import json
    from bench.memory import decode_weight_bytes, text_tensors
    from ms_ocr.convert.safetensors_io import save_file
    tensors = {"model.layers.0.self_attn.q_proj.weight": np.zeros((64, 32), np.float32),  # 2,048
               "model.layers.1.mlp.experts.0.up_proj.weight": np.zeros((16, 32), np.float32),  # 512 each, 4 experts
               "model.layers.1.mlp.experts.1.up_proj.weight": np.zeros((16, 32), np.float32),
               "model.layers.1.mlp.experts.2.up_proj.weight": np.zeros((16, 32), np.float32),
               "model.layers.1.mlp.experts.3.up_proj.weight": np.zeros((16, 32), np.float32),
               "model.embed_tokens.weight": np.zeros((100, 32), np.float32),  # 3,200: the head's table
               "model.vision_model.layers.0.fc1.weight": np.zeros((256, 256), np.float32)}  # never read by decode
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"language_config": {"n_routed_experts": 4,
                                                                          "num_experts_per_tok": 1}}))
    want = 2048 + 512 + 3200  # one of four experts a token
    assert decode_weight_bytes(str(tmp_path)) == 4 * want
    assert decode_weight_bytes(str(tmp_path), 2, text_tensors(str(tmp_path))) == 2 * want
    tensors["lm_head.weight"] = np.zeros((100, 32), np.float32)  # untied: the head read, the table gathered
    save_file(tensors, str(tmp_path / "model.safetensors"))
    assert decode_weight_bytes(str(tmp_path), 1) == want


def test_prefill_flops_count_every_prompt_row_through_the_layers_the_experts_it_uses_and_the_head_once():
    """bench/compute.py's prefill bound: 2 N flops a layer weight (top-k of n of the routed experts), the causal
    attention's 2 * 2 * heads * head_dim * N (N + 1) / 2 a layer, the head on one row; norms, the embedding table as
    an input and the vision side not counted."""
    from bench.compute import prefill_flops
    f32 = "F32"
    tensors = {"model.layers.0.self_attn.q_proj.weight": (f32, 64 * 32),
               "model.layers.0.input_layernorm.weight": (f32, 32),
               "model.layers.1.mlp.gate.weight": (f32, 4 * 32),  # the router: every row
               "model.layers.1.mlp.experts.0.up_proj.weight": (f32, 512),
               "model.layers.1.mlp.experts.1.up_proj.weight": (f32, 512),
               "model.layers.1.mlp.shared_experts.up_proj.weight": (f32, 256),
               "model.embed_tokens.weight": (f32, 100 * 32),
               "model.norm.weight": (f32, 32)}
    config = {"language_config": {"n_routed_experts": 2, "num_experts_per_tok": 1, "num_hidden_layers": 2,
                                  "num_attention_heads": 2, "hidden_size": 32}}
    rows = 64 * 32 + 4 * 32 + 512 + 256  # one of two experts a token
    attention = 2 * 2 * 2 * 2 * 16 * 10 * 11 / 2  # 2 layers, 2 heads of 16, 10 tokens
    assert prefill_flops(config, tensors, 10) == 2 * 10 * rows + attention + 2 * 3200  # tied head
    tensors["lm_head.weight"] = (f32, 100 * 32 + 32)
    assert prefill_flops(config, tensors, 10) == 2 * 10 * rows + attention + 2 * 3232
