"""Random-weight checkpoints at the real architecture, for the benchmarks (bench/run.py build_checkpoint) and the
full-size tests (real weights cannot be fetched here): BUILDERS[model](out_dir).

Saved as bf16 like the hub release, with the small test tokenizers (bench/tiny_tokenizer.py, bench/tiny_bpe.py): token
ids only need to exist, the architecture and shapes are what the timings depend on.
"""

import json
import os

def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)


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


def randomize_with_stats_(module, seed, gain=1.0):
    """Refill every float tensor of a torch module's state dict (batch-norm running statistics included, so
    every term of a frozen norm matters): matrices and kernels ~ N(0, gain / fan_in), running_var 0.5 + |N|,
    other weights 1 + 0.2 N, the rest 0.2 N. HF's detector init zeroes several layers, which would hide bugs."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in sorted(module.state_dict().items()):
            if name.endswith("num_batches_tracked") or not t.is_floating_point():
                continue
            noise = torch.randn(t.shape, generator=gen)
            if name.endswith("running_var"):
                t.copy_(0.5 + noise.abs())
            elif t.ndim >= 2:
                t.copy_(noise * (gain / t[0].numel()) ** 0.5)
            elif name.endswith("weight"):
                t.copy_(1 + 0.2 * noise)
            else:
                t.copy_(0.2 * noise)
    return module


# The released preprocessor settings of PaddlePaddle/PaddleOCR-VL.
PADDLE_MIN_PIXELS, PADDLE_MAX_PIXELS = 147384, 2822400


def make_paddleocr_vl(out_dir, seed=0):
    import torch
    from transformers import PaddleOCRVLConfig, PaddleOCRVLForConditionalGeneration, PaddleOCRVLImageProcessorPil
    from bench.paddle_tokens import SPECIAL_IDS
    from bench.tiny_tokenizer import write_tokenizer

    torch.manual_seed(seed)
    rope = {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [16, 24, 24]}
    cfg = PaddleOCRVLConfig(text_config={"rope_parameters": rope}, **SPECIAL_IDS)  # reference defaults = 0.9B
    model = PaddleOCRVLForConditionalGeneration(cfg).to(torch.bfloat16).eval()
    model.generation_config.update(eos_token_id=2, bos_token_id=1, pad_token_id=0)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    PaddleOCRVLImageProcessorPil(min_pixels=PADDLE_MIN_PIXELS, max_pixels=PADDLE_MAX_PIXELS,
                                 image_mean=[0.5] * 3, image_std=[0.5] * 3).save_pretrained(out_dir)
    write_tokenizer(out_dir, "json", "transformers", seed)
    return out_dir


# tencent/HunyuanOCR (v1.0) text and vision sizes and its preprocessor's pixel budget.
HUNYUAN_TEXT = dict(vocab_size=120818, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
                    num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=32768,
                    rms_norm_eps=1e-5, hidden_act="silu")
HUNYUAN_MIN_PIXELS, HUNYUAN_MAX_PIXELS = 262144, 4194304


def make_hunyuan_ocr(out_dir, seed=0):
    import torch
    from transformers import HunYuanVLConfig, HunYuanVLForConditionalGeneration, HunYuanVLImageProcessorPil
    from bench import hunyuan_tokens as T

    torch.manual_seed(seed)
    rope = {"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0,
            "mrope_section": [16, 16, 16, 16]}
    text = dict(HUNYUAN_TEXT, rope_parameters=rope, bos_token_id=T.BOS, eos_token_id=T.EOS, pad_token_id=T.PAD)
    cfg = HunYuanVLConfig(text_config=text, vision_config={}, **T.ROOT_IDS)  # vision defaults = the real ViT
    model = HunYuanVLForConditionalGeneration(cfg).to(torch.bfloat16).eval()
    model.generation_config.update(eos_token_id=[T.EOS, T.EOD], bos_token_id=T.BOS, pad_token_id=T.PAD)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    HunYuanVLImageProcessorPil(min_pixels=HUNYUAN_MIN_PIXELS, max_pixels=HUNYUAN_MAX_PIXELS).save_pretrained(out_dir)
    T.write_tokenizer_json(os.path.join(out_dir, "tokenizer.json"), seed)
    _write_json(os.path.join(out_dir, "tokenizer_config.json"), T.tokenizer_config("transformers"))
    with open(os.path.join(out_dir, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(T.CHAT_TEMPLATE)
    return out_dir


# HunyuanOCR-1.5's published differences from 1.0's files (docs/model-versions.md, section 4): the vision tower's
# sequence budget vision_config.max_vit_seq_len 65,536, the text fields also at the root of the nested config, pages
# up to 4096x4096 pixels (65,536 patches).
HUNYUAN_1_5_MAX_PIXELS = 4096 * 4096


def as_hunyuan_ocr_1_5(folder):
    """Rewrite a HunyuanOCR folder's config.json and preprocessor_config.json as HunyuanOCR-1.5 publishes them;
    returns `folder`. The architecture and weights are 1.0's (the same tensor shapes)."""
    path = os.path.join(folder, "config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    for key, value in config["text_config"].items():
        config.setdefault(key, value)
    config["vision_config"]["max_vit_seq_len"] = 65536
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    path = os.path.join(folder, "preprocessor_config.json")
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    settings["max_pixels"] = HUNYUAN_1_5_MAX_PIXELS
    settings["size"] = {**settings.get("size", {}), "longest_edge": HUNYUAN_1_5_MAX_PIXELS}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(settings, f, indent=2)
    return folder


def make_hunyuan_ocr_1_5(out_dir, seed=0):
    return as_hunyuan_ocr_1_5(make_hunyuan_ocr(out_dir, seed))


def make_deepseek_ocr2(out_dir, seed=0):
    """DeepSeek-OCR-2 at its real size (SAM ViT-B, Qwen2-0.5B query encoder, 3B MoE decoder: the transformers
    config defaults but for the text model, set to DeepSeek-OCR's) with random weights, built in bf16."""
    import torch
    from transformers import DeepseekOcr2Config, DeepseekOcr2ForConditionalGeneration, DeepseekOcr2ImageProcessorPil
    from bench import deepseek_tokens as T
    from bench.tiny_bpe import write_bpe_tokenizer

    torch.manual_seed(seed)
    text = dict(vocab_size=129280, hidden_size=1280, intermediate_size=6848, num_hidden_layers=12,
                num_attention_heads=10, num_key_value_heads=10, moe_intermediate_size=896, n_routed_experts=64,
                num_experts_per_tok=6, n_shared_experts=2, max_position_embeddings=8192,
                mlp_layer_types=["dense"] + ["sparse"] * 11, bos_token_id=T.BOS, eos_token_id=T.EOS,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    encoder = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                   num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    cfg = DeepseekOcr2Config(vision_config=dict(sam_config={}, encoder_config=encoder), text_config=text,
                             image_token_id=T.IMAGE_TOKEN_ID)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # 7.8 GB instead of 15.6 GB while building
    try:
        model = DeepseekOcr2ForConditionalGeneration(cfg).eval()
    finally:
        torch.set_default_dtype(default)
    # transformers initialises SAM with std 1e-10 and a zero position table: the neck's LayerNorms then
    # normalise rounding noise and any two implementations disagree; the routers at std 0.02 give near-ties
    # among 64 experts. Redraw both so the comparison in the benchmark means something.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".sam_encoder." in name and (param.ndim >= 2 or name.endswith("pos_embed")):
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
            elif name.endswith("mlp.gate.weight"):
                param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
    model.generation_config.update(bos_token_id=T.BOS, eos_token_id=T.EOS)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    DeepseekOcr2ImageProcessorPil().save_pretrained(out_dir)
    write_bpe_tokenizer(os.path.join(out_dir, "tokenizer.json"), T.BPE_VOCAB, T.SPECIALS, seed, bos=T.SPECIALS[0])
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": T.SPECIALS[0], "eos_token": T.SPECIALS[1], "pad_token": T.SPECIALS[8],
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, ensure_ascii=False)
    return out_dir


def deepseek_ocr_config(image_token_id):
    """deepseek-ai/DeepSeek-OCR's config.json layout and sizes (v1)."""
    language = dict(vocab_size=129280, hidden_size=1280, intermediate_size=6848, num_hidden_layers=12,
                    num_attention_heads=10, num_key_value_heads=10, moe_intermediate_size=896, n_routed_experts=64,
                    num_experts_per_tok=6, n_shared_experts=2, first_k_dense_replace=1, max_position_embeddings=8192,
                    topk_method="greedy", use_mla=False, bos_token_id=360, eos_token_id=361)
    return {"architectures": ["DeepseekOCRForCausalLM"], "model_type": "deepseek_vl_v2", "language_config": language,
            "projector_config": {"input_dim": 2048, "n_embed": 1280, "projector_type": "linear"},
            "vision_config": {"image_size": 1024, "width": {
                "clip-l-14-224": {"heads": 16, "image_size": 224, "layers": 24, "patch_size": 14, "width": 1024},
                "sam_vit_b": {"downsample_channels": [512, 1024], "global_attn_indexes": [2, 5, 8, 11], "heads": 12,
                              "layers": 12, "width": 768}}},
            "image_token_id": image_token_id}


def deepseek_ocr2_hub_config(config, arch):
    """The remote-code config.json deepseek-ai/DeepSeek-OCR-2 ships (language_config, vision_config.width,
    projector_config), which llama.cpp's converter reads, from a transformers-5 one (text_config,
    vision_config.{sam_config, encoder_config}) of the same sizes; `arch` its architecture. The vendored converter
    registers DeepseekOCR2ForCausalLM for the projector (--mmproj) only, so the text GGUF is converted under
    DeepSeek-OCR's name: the same DeepSeek-V2 decoder, both written as llama.cpp's deepseek2-ocr. Without MLA the
    whole head dim is roped (qk_rope_head_dim = head_dim)."""
    text, vision = config["text_config"], config["vision_config"]
    sam, enc = vision["sam_config"], vision["encoder_config"]
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok",
            "n_shared_experts", "max_position_embeddings", "rms_norm_eps", "bos_token_id", "eos_token_id",
            "routed_scaling_factor", "topk_method")
    language = {k: text[k] for k in keys if k in text}
    language.update(first_k_dense_replace=text["mlp_layer_types"].index("sparse"), use_mla=False,
                    kv_lora_rank=None, q_lora_rank=None, qk_rope_head_dim=head_dim,
                    rope_theta=text.get("rope_parameters", {}).get("rope_theta", 10000.0))
    return {"architectures": [arch], "model_type": "deepseek_vl_v2", "language_config": language,
            "tie_word_embeddings": config.get("tie_word_embeddings", False),
            "projector_config": {"input_dim": enc["hidden_size"], "n_embed": text["hidden_size"],
                                 "projector_type": "linear"},
            "vision_config": {"image_size": sam.get("image_size", 1024), "width": {
                "sam_vit_b": {"width": sam["hidden_size"], "layers": sam["num_hidden_layers"],
                              "heads": sam["num_attention_heads"], "global_attn_indexes": sam["global_attn_indexes"],
                              "downsample_channels": sam["downsample_channels"]},
                "qwen2-0-5b": {"dim": enc["hidden_size"]}}},
            "image_token_id": config["image_token_id"]}


def unlimited_ocr_config(image_token_id):
    """baidu/Unlimited-OCR's config.json layout and sizes: DeepSeek-OCR's with its model_type, architectures,
    auto_map, max_position_embeddings 32768 and the top-level sliding window of 128."""
    config = deepseek_ocr_config(image_token_id)
    config["language_config"].update(max_position_embeddings=32768, sliding_window_size=128)
    return dict(config, model_type="unlimited-ocr", architectures=["UnlimitedOCRForCausalLM"], sliding_window=128,
                sliding_window_size=128, auto_map={"AutoConfig": "modeling_unlimitedocr.UnlimitedOCRConfig",
                                                   "AutoModel": "modeling_unlimitedocr.UnlimitedOCRForCausalLM"})


def make_unlimited_ocr(out_dir, seed=0):
    """Unlimited-OCR at its real size with random weights, as make_deepseek_ocr writes v1's (the same names)."""
    return make_deepseek_ocr(out_dir, seed, model="unlimited-ocr")


def make_deepseek_ocr(out_dir, seed=0, shard_params=400_000_000, model="deepseek-ocr"):
    """DeepSeek-OCR v1 (or `model` unlimited-ocr, the same tensors) at its real size with random weights (no
    transformers class for v1: weights are drawn for ms_ocr's own parameter list and written under the hub's
    names, per-expert, bf16, sharded with an index)."""
    import numpy as np
    from ms_ocr import models
    from ms_ocr.convert.safetensors_io import save_file
    from bench import deepseek_tokens as T
    from bench.tiny_bpe import write_bpe_tokenizer

    os.makedirs(out_dir, exist_ok=True)
    config = (deepseek_ocr_config if model == "deepseek-ocr" else unlimited_ocr_config)(T.IMAGE_TOKEN_ID)
    spec = models.get(model)
    net = spec.build(spec.resolve("config").from_dict(config))
    rng = np.random.default_rng(seed)

    def draw(name, shape):
        if len(shape) == 1:
            return (np.ones(shape) if name.endswith(("norm.weight", "layernorm.weight", "norm1.weight", "norm2.weight",
                                                     "pre_layrnorm.weight")) else rng.standard_normal(shape) * 0.02)
        return rng.standard_normal(shape, dtype=np.float32) * (0.5 if name.endswith("mlp.gate.weight") else 0.02)

    shards, current, size, index = [], {}, 0, {}
    for p in net.get_parameters():
        if p.name.endswith("_cache"):
            continue
        hub = "model." + p.name[len("vision."):] if p.name.startswith("vision.") else p.name
        if ".mlp.experts." in hub:  # stacked -> one tensor per expert, as the hub stores them
            stacked = draw(hub, tuple(p.shape)).astype(np.float32)
            for e in range(p.shape[0]):
                current[f"{hub.rsplit('.', 1)[0]}.{e}.{hub.rsplit('.', 1)[1]}.weight"] = (stacked[e], "BF16")
        else:
            current[hub] = (np.asarray(draw(hub, tuple(p.shape)), np.float32), "BF16")
        size += int(np.prod(p.shape))
        if size >= shard_params:
            shards.append(current)
            current, size = {}, 0
    shards.append(current)
    for i, tensors in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, os.path.join(out_dir, name), metadata={"format": "pt"})
        index.update({k: name for k in tensors})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": index}, f)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    write_bpe_tokenizer(os.path.join(out_dir, "tokenizer.json"), T.BPE_VOCAB, T.SPECIALS, seed, bos=T.SPECIALS[0])
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": T.SPECIALS[0], "eos_token": T.SPECIALS[1], "pad_token": T.SPECIALS[8],
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, ensure_ascii=False)
    return out_dir


def make_pp_doclayout_v2(out_dir, seed=0):
    """PP-DocLayoutV2 at the reference's default (real) architecture with the hub's 25 labels, thresholds and
    class order, fp32 as PaddlePaddle/PP-DocLayoutV2_safetensors, and its 800x800 preprocessor config."""
    import torch
    from transformers import PPDocLayoutV2Config, PPDocLayoutV2ForObjectDetection
    from bench.layout import CLASS_ORDER, LABELS, THRESHOLDS
    torch.manual_seed(seed)
    cfg = PPDocLayoutV2Config(id2label=dict(enumerate(LABELS)), class_thresholds=THRESHOLDS, class_order=CLASS_ORDER)
    model = PPDocLayoutV2ForObjectDetection(cfg).eval()
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "PPDocLayoutV2ImageProcessor", "do_resize": True, "resample": 3,
                   "size": {"height": 800, "width": 800}, "do_rescale": True, "rescale_factor": 1 / 255,
                   "do_normalize": True, "image_mean": [0, 0, 0], "image_std": [1, 1, 1]}, f)
    return out_dir


def make_pp_doclayout(out_dir, version, seed=0, stats=False):
    """PP-DocLayoutV2 ("v2": the hub's thresholds and class order), V3 ("v3") or V4 ("v4", with its page-geometry
    head) at the reference's default (real) architecture with the hub's 25 labels, fp32, saved by transformers, and
    an 800x800 preprocessor config. Weights: the
    reference's initialisation (seeded), or with `stats` every tensor random (randomize_with_stats_: no zeroed
    layer, every batch-norm statistic counts). Returns the reference model."""
    import torch
    import transformers
    from bench.layout import CLASS_ORDER, LABELS, PREPROCESSOR, THRESHOLDS
    n = version[-1]
    torch.manual_seed(seed)
    extra = {"deform_pred": True} if n == "4" else {"class_thresholds": THRESHOLDS,
                                                    "class_order": CLASS_ORDER} if n == "2" else {}
    cfg = getattr(transformers, f"PPDocLayoutV{n}Config")(id2label=dict(enumerate(LABELS)), **extra)
    model = getattr(transformers, f"PPDocLayoutV{n}ForObjectDetection")(cfg).eval()
    if stats:
        randomize_with_stats_(model, seed)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "preprocessor_config.json"), "w") as f:
        json.dump(dict(PREPROCESSOR, image_processor_type=f"PPDocLayoutV{n}ImageProcessor",
                       size={"height": 800, "width": 800}), f)
    return model


def make_pp_doclayout_scored(out_dir, version, seed=1):
    """make_pp_doclayout with every tensor random, and V3's mask logits x16 (masks pass a threshold in parts): scores
    spread over the queries as a trained model's do, where the reference's initialisation scores every query alike
    (the pipeline benchmark's layout checkpoints: its post-processing sees a page's worth of detections). Returns the
    reference model."""
    import torch
    model = make_pp_doclayout(out_dir, version, seed, stats=True)
    if version[-1] == "3":
        with torch.no_grad():
            for t in model.model.mask_query_head.layers[-1].parameters():
                t.mul_(16.0)
        model.save_pretrained(out_dir)
    return model


def make_pp_doclayout_v3(out_dir, seed=0):
    make_pp_doclayout(out_dir, "v3", seed)
    return out_dir


def make_pp_doclayout_v4(out_dir, seed=0):
    make_pp_doclayout(out_dir, "v4", seed)
    return out_dir


BUILDERS = {"paddleocr-vl": make_paddleocr_vl, "pp-doclayout-v2": make_pp_doclayout_v2,
            "pp-doclayout-v3": make_pp_doclayout_v3, "pp-doclayout-v4": make_pp_doclayout_v4, "hunyuan-ocr": make_hunyuan_ocr,
            "hunyuan-ocr-1.5": make_hunyuan_ocr_1_5,
            "deepseek-ocr2": make_deepseek_ocr2, "deepseek-ocr": make_deepseek_ocr, "unlimited-ocr": make_unlimited_ocr,
            **{f"pp-doclayout-{v}-scored": (lambda out_dir, v=v: make_pp_doclayout_scored(out_dir, v))
               for v in ("v2", "v3", "v4")}}
