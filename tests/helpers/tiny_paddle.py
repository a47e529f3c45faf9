"""Tiny random PaddleOCR-VL checkpoints in the two layouts real ones ship, built with transformers.

"transformers": what transformers 5.x saves (nested config, chat_template.jinja, its preprocessor_config.json).
"hub": the PaddlePaddle/PaddleOCR-VL repository's original files (flat config with `rope_scaling`, legacy
min/max_pixels, template inside tokenizer_config.json, extra unused weights the reference ignores).
Weights use a larger std than transformers' init so logits are O(1..10) and greedy tokens are decisive.
"""

import json
import os
import tempfile

from bench.paddle_tokens import SPECIAL_IDS, VOCAB_SIZE
from bench.tiny_tokenizer import write_tokenizer
from tests.helpers.parity import randomize_

TEXT = dict(vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-5,
            use_bias=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
MROPE_SECTION = [2, 3, 3]
ROPE_THETA = 500000.0
VISION = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_channels=3,
              image_size=56, patch_size=14, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, spatial_merge_size=2)
MIN_PIXELS, MAX_PIXELS = 28 * 28 * 4, 28 * 28 * 64  # 4..64 merged image tokens keep tests fast
HUB_PREPROCESSOR = {"min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS, "image_mean": [0.5, 0.5, 0.5],
                    "image_std": [0.5, 0.5, 0.5], "patch_size": 14, "merge_size": 2, "temporal_patch_size": 1,
                    "resample": 3, "rescale_factor": 0.00392156862745098, "do_convert_rgb": True,
                    "do_normalize": True, "do_rescale": True, "do_resize": True,
                    "image_processor_type": "PaddleOCRVLImageProcessor"}


def tiny_config():
    from transformers import PaddleOCRVLConfig

    rope = {"rope_type": "default", "rope_theta": ROPE_THETA, "mrope_section": MROPE_SECTION}
    return PaddleOCRVLConfig(text_config={**TEXT, "rope_parameters": rope, "tie_word_embeddings": False},
                             vision_config=dict(VISION), tie_word_embeddings=False, **SPECIAL_IDS)


def tiny_model(seed=0):
    """The random reference model: matrices ~ N(0, 0.2) (patch conv N(0, 0.05)), norm weights ~ 1 + N(0, 0.1),
    biases ~ N(0, 0.1), drawn in parameter-name order from `seed`."""
    from transformers import PaddleOCRVLForConditionalGeneration

    model = randomize_(PaddleOCRVLForConditionalGeneration(tiny_config()).eval(), seed)
    model.generation_config.update(eos_token_id=2, bos_token_id=1, pad_token_id=0)
    return model


def hub_config_json(dtype):
    """config.json in the hub's original flat form (text fields at the root, rope_scaling, extra hub keys)."""
    vision = {"architectures": ["PaddleOCRVisionModel"], "model_type": "paddleocr_vl", **VISION,
              "attention_dropout": 0.0, "pad_token_id": 0, "temporal_patch_size": 2, "tokens_per_second": 2,
              "torch_dtype": dtype}
    return {"architectures": ["PaddleOCRVLForConditionalGeneration"], "model_type": "paddleocr_vl", **TEXT,
            "rope_theta": ROPE_THETA,
            "rope_scaling": {"mrope_section": MROPE_SECTION, "rope_type": "default", "type": "default"},
            "tie_word_embeddings": False, **SPECIAL_IDS, "compression_ratio": 1.0, "hidden_dropout_prob": 0.0,
            "ignored_index": -100, "max_sequence_length": None, "sliding_window": None, "use_3d_rope": True,
            "rope_is_neox_style": True, "use_cache": False, "use_flash_attention": False,
            "weight_share_add_bias": True, "torch_dtype": dtype, "transformers_version": "4.55.0",
            "vision_config": vision}


def hub_extra_weights(embed, generator):
    """Weights the real hub checkpoint carries and the reference ignores (unused SigLIP pooling head, packing
    position table) plus an explicit lm_head copy of the embedding."""
    import torch

    h, i = VISION["hidden_size"], VISION["intermediate_size"]
    shapes = {"embeddings.packing_position_embedding.weight": (64, h), "head.probe": (1, 1, h),
              "head.attention.in_proj_weight": (3 * h, h), "head.attention.in_proj_bias": (3 * h,),
              "head.attention.out_proj.weight": (h, h), "head.attention.out_proj.bias": (h,),
              "head.layernorm.weight": (h,), "head.layernorm.bias": (h,), "head.mlp.fc1.weight": (i, h),
              "head.mlp.fc1.bias": (i,), "head.mlp.fc2.weight": (h, i), "head.mlp.fc2.bias": (h,)}
    extra = {f"visual.vision_model.{k}": (torch.randn(s, generator=generator) * 0.2).to(embed.dtype)
             for k, s in shapes.items()}
    extra["lm_head.weight"] = embed.clone()
    return extra


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)


def _save_hub_weights(model, out_dir, max_shard_size, seed):
    import torch
    from huggingface_hub import save_torch_state_dict
    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)  # writes the hub's names (visual.vision_model.*, mlp_AR.*, model.*)
        state = {}
        for name in sorted(os.listdir(tmp)):
            if name.endswith(".safetensors"):
                state.update(load_file(os.path.join(tmp, name)))
    state.update(hub_extra_weights(state["model.embed_tokens.weight"], torch.Generator().manual_seed(seed + 1)))
    save_torch_state_dict(state, out_dir, max_shard_size=max_shard_size or "5GB", metadata={"format": "pt"})


def make_tiny_checkpoint(out_dir, layout="transformers", dtype="float32", max_shard_size=None,
                         tokenizer_kind="json", seed=0):
    """Write a tiny random PaddleOCR-VL checkpoint folder and return `out_dir`."""
    import torch
    from transformers import PaddleOCRVLImageProcessorPil

    if layout not in ("transformers", "hub") or dtype not in ("float32", "bfloat16"):
        raise ValueError(f"unknown layout/dtype {layout!r}/{dtype!r}")
    os.makedirs(out_dir, exist_ok=True)
    model = tiny_model(seed).to(getattr(torch, dtype))
    if layout == "transformers":
        model.save_pretrained(out_dir, max_shard_size=max_shard_size or "50GB")
        PaddleOCRVLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, image_mean=[0.5] * 3,
                                     image_std=[0.5] * 3).save_pretrained(out_dir)
    else:
        _save_hub_weights(model, out_dir, max_shard_size, seed)
        _write_json(os.path.join(out_dir, "config.json"), hub_config_json(dtype))
        _write_json(os.path.join(out_dir, "generation_config.json"),
                    {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "use_cache": True})
        _write_json(os.path.join(out_dir, "preprocessor_config.json"), HUB_PREPROCESSOR)
    write_tokenizer(out_dir, tokenizer_kind, layout, seed)
    return out_dir
