"""Tiny random HunyuanOCR checkpoints in the two layouts real ones ship, built with transformers.

"transformers": what transformers 5.x saves (nested config with rope_parameters/mrope_section,
chat_template.jinja, named image tokens in tokenizer_config.json).
"hub": tencent/HunyuanOCR v1.0's original files (flat config with rope_scaling type "xdrope", alpha and
xdrope_section, legacy attention_head_dim / org_vocab_size / pad_id, image_*_token_id, an eos list,
`resample: 1` in preprocessor_config.json, the template inside tokenizer_config.json and no named image
tokens, bf16 shards + index on request).
The tokenizer is a byte-level BPE trained here with HunyuanOCR's special tokens appended as added tokens.
"""

import json
import os

from tests.helpers.parity import randomize_
# the tokenizer's special tokens, files and the chat template (bench/: the references, benchmarks and real-size
# checkpoints use them too)
from bench.hunyuan_tokens import (BOS, BPE_VOCAB, CHAT_TEMPLATE, EOD, EOS, IDS, IMAGE, IMAGE_END,  # noqa: F401
                                  IMAGE_START, NEWLINE, PAD, ROOT_IDS, SPECIALS, VOCAB_SIZE, tokenizer_config,
                                  write_tokenizer_json)
from bench.references import hunyuan_reference_inputs as reference_inputs  # noqa: F401
from bench.references import hunyuan_reference_processor as reference_processor


TEXT = dict(vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-5,
            attention_bias=False, bos_token_id=BOS, eos_token_id=EOS, eod_token_id=EOD, pad_token_id=PAD)
XDROPE_SECTION = [2, 2, 2, 2]
ROPE = dict(rope_theta=10000.0, alpha=1000.0, factor=1.0)
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_channels=3,
              patch_size=16, spatial_merge_size=2, max_image_size=128, rms_norm_eps=1e-5, hidden_act="gelu",
              interpolate_mode="bilinear")
MIN_PIXELS, MAX_PIXELS = 32 * 32 * 4, 32 * 32 * 48  # 4..48 merged tokens keep tests fast
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


def tiny_config():
    from transformers import HunYuanVLConfig

    rope = {"rope_type": "dynamic", **ROPE, "mrope_section": XDROPE_SECTION}
    return HunYuanVLConfig(text_config={**TEXT, "rope_parameters": rope}, vision_config=dict(VISION), **ROOT_IDS)


def tiny_model(seed=0):
    """The random reference model: matrices ~ N(0, 0.2) (convs N(0, 0.05)), norm weights ~ 1 + N(0, 0.1),
    biases and the merger's learned rows ~ N(0, 0.1)..N(0, 1), drawn in parameter-name order from `seed`."""
    from transformers import HunYuanVLForConditionalGeneration

    model = HunYuanVLForConditionalGeneration(tiny_config()).eval()
    randomize_(model, seed, vectors=lambda name: 1.0 if name.split(".")[-1].startswith("image_") else None)
    model.generation_config.update(eos_token_id=[EOS, EOD], bos_token_id=BOS, pad_token_id=PAD)
    return model


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)


def hub_config_json(dtype):
    """config.json in v1.0's flat form."""
    vision = {**VISION, "add_patchemb_bias": True, "attention_dropout": 0.0, "cat_extra_token": 1,
              "hidden_dropout": 0.0, "img_max_token_num": 4096, "max_vit_seq_len": 16384, "out_hidden_size": 64}
    text = {k: v for k, v in TEXT.items() if k not in ("head_dim", "vocab_size", "pad_token_id", "eos_token_id")}
    return {"architectures": ["HunYuanVLForConditionalGeneration"], "model_type": "hunyuan_vl", **text,
            "attention_head_dim": TEXT["head_dim"], "head_dim": TEXT["head_dim"], "org_vocab_size": VOCAB_SIZE,
            "vocab_size": VOCAB_SIZE, "pad_id": PAD, "pad_token_id": -1, "eos_token_id": [EOS, EOD],
            "image_start_token_id": IMAGE_START, "image_end_token_id": IMAGE_END, "image_token_id": IMAGE,
            "image_newline_token_id": NEWLINE, "rope_theta": ROPE["rope_theta"],
            "rope_scaling": {"alpha": ROPE["alpha"], "beta_fast": 32, "beta_slow": 1, "factor": 1.0, "mscale": 1.0,
                             "mscale_all_dim": 1.0, "type": "xdrope", "xdrope_section": XDROPE_SECTION},
            "mlp_bias": False, "norm_type": "rms", "num_experts": 1, "use_qk_norm": True, "use_cla": False,
            "tie_word_embeddings": True, "dtype": dtype, "transformers_version": "4.49.0", "vision_config": vision}


def hub_preprocessor():
    return {"min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS, "patch_size": 16, "resample": 1,
            "temporal_patch_size": 1, "merge_size": 2, "image_mean": CLIP_MEAN, "image_std": CLIP_STD,
            "image_processor_type": "HunYuanVLImageProcessor", "processor_class": "HunYuanVLProcessor"}


def make_tiny_checkpoint(out_dir, layout="transformers", dtype="float32", max_shard_size=None, seed=0):
    """Write a tiny random HunyuanOCR checkpoint folder and return `out_dir`."""
    import torch
    from transformers import HunYuanVLImageProcessorPil

    if layout not in ("transformers", "hub") or dtype not in ("float32", "bfloat16"):
        raise ValueError(f"unknown layout/dtype {layout!r}/{dtype!r}")
    os.makedirs(out_dir, exist_ok=True)
    model = tiny_model(seed).to(getattr(torch, dtype))
    # save_pretrained writes the hub's names (vit.*, vit.perceive.*, model.*), no lm_head (tied)
    model.save_pretrained(out_dir, max_shard_size=max_shard_size or "50GB")
    write_tokenizer_json(os.path.join(out_dir, "tokenizer.json"), seed)
    _write_json(os.path.join(out_dir, "tokenizer_config.json"), tokenizer_config(layout))
    if layout == "transformers":
        HunYuanVLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS).save_pretrained(out_dir)
        with open(os.path.join(out_dir, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(CHAT_TEMPLATE)
    else:
        _write_json(os.path.join(out_dir, "config.json"), hub_config_json(dtype))
        _write_json(os.path.join(out_dir, "generation_config.json"),
                    {"bos_token_id": BOS, "eos_token_id": [EOS, EOD], "pad_token_id": PAD, "do_sample": False})
        _write_json(os.path.join(out_dir, "preprocessor_config.json"), hub_preprocessor())
        _write_json(os.path.join(out_dir, "special_tokens_map.json"),
                    {"bos_token": "<｜hy_begin▁of▁sentence｜>", "eos_token": "<｜hy_Assistant｜>",
                     "pad_token": "<｜hy_▁pad▁｜>"})
    return out_dir


def reference_greedy(folder, images, prompt, max_new_tokens, system=None, weights_dtype=None, repetition_penalty=1.0):
    """Greedy token ids from transformers' generate (fp32 compute; weights optionally rounded to bf16), with
    `repetition_penalty` as HunyuanOCR-1.5's transformers client passes it to generate."""
    import torch
    from transformers import HunYuanVLForConditionalGeneration

    model = HunYuanVLForConditionalGeneration.from_pretrained(folder, dtype=weights_dtype or torch.float32)
    model = model.float().eval()
    inputs = reference_inputs(reference_processor(folder), images, prompt, system)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                             repetition_penalty=repetition_penalty)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


def infer_json(folder, image, new_tokens, *extra):
    """`python -m ms_ocr.infer --model hunyuan-ocr --json` on one image (it must succeed): its JSON records and
    stderr."""
    from tests.cli_util import run_module
    proc = run_module("ms_ocr.infer", "--model", "hunyuan-ocr", "--model-path", folder, "--image", image,
                      "--max-new-tokens", str(new_tokens), "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")], proc.stderr
