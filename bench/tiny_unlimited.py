"""Tiny random Unlimited-OCR models and checkpoints built with transformers 5.25 (for the tests and
scripts/measure_window_memory.py), and the reference's inputs. transformers' UnlimitedOcrImageProcessor needs
torchvision (no CPU build for this torch here), so the reference is fed the pixel tensors of our DeepEncoder-v1
processor (checked against the official DeepSeek-OCR code: tests/models/deepseek/test_processor_v1.py) in the layout
its model takes."""

import json
import os

import numpy as np

from bench.deepseek_tokens import BPE_VOCAB, SPECIALS
from bench.real_size import randomize_

WINDOW = 8  # small, so that a short answer crosses it many times
BOS, EOS, IMAGE_TOKEN_ID = BPE_VOCAB, BPE_VOCAB + 1, BPE_VOCAB + 2  # SPECIALS' first three
# SAM at 256 px (the processor's modes scale with it: global view 256, tiles 160), CLIP's 4x4 grid = SAM's output
SAM = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_dim=64, image_size=256, patch_size=16,
           window_size=4, global_attn_indexes=[1], output_channels=16, downsample_channels=[24, 32])
CLIP = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=56,
            patch_size=14)
TEXT = dict(vocab_size=400, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=3,
            n_shared_experts=2, max_position_embeddings=8192, bos_token_id=BOS, eos_token_id=EOS,
            mlp_layer_types=["dense", "sparse", "sparse"])


def tiny_model(window=WINDOW, seed=0, text=None):
    """transformers' UnlimitedOcrForConditionalGeneration at the tiny sizes (`text`: decoder sizes changed), random
    weights (eager attention)."""
    from transformers import UnlimitedOcrConfig, UnlimitedOcrForConditionalGeneration
    text = dict(TEXT, **(text or {}), sliding_window=window)
    cfg = UnlimitedOcrConfig(image_token_id=IMAGE_TOKEN_ID, text_config=text,
                             vision_config=dict(sam_config=SAM, encoder_config=CLIP))
    cfg._attn_implementation = "eager"
    model = UnlimitedOcrForConditionalGeneration(cfg).eval()
    return randomize_(model, seed, vectors=lambda name: 1.0 if "view_separator" in name or "newline" in name
                      else None)


def hub_config(window=WINDOW):
    """The tiny model's config.json as the hub ships Unlimited-OCR (remote code): DeepSeek-OCR v1's layout with
    model_type "unlimited-ocr", its architectures and auto_map, and the window at the top level (and
    language_config.sliding_window_size, as the original)."""
    lang = {k: v for k, v in TEXT.items() if k != "mlp_layer_types"}
    lang.update(architectures=["DeepseekOCRForCausalLM"], model_type="deepseek_v2", first_k_dense_replace=1,
                topk_method="greedy", use_mla=False, n_group=1, topk_group=1, kv_lora_rank=None, q_lora_rank=None,
                qk_nope_head_dim=0, qk_rope_head_dim=0, v_head_dim=128, rms_norm_eps=1e-6, routed_scaling_factor=1.0,
                sliding_window_size=window)
    sam = dict(width=SAM["hidden_size"], layers=SAM["num_hidden_layers"], heads=SAM["num_attention_heads"],
               global_attn_indexes=SAM["global_attn_indexes"], downsample_channels=SAM["downsample_channels"],
               image_size=SAM["image_size"], window_size=SAM["window_size"], out_chans=SAM["output_channels"],
               mlp_ratio=SAM["mlp_dim"] / SAM["hidden_size"])
    clip = dict(width=CLIP["hidden_size"], layers=CLIP["num_hidden_layers"], heads=CLIP["num_attention_heads"],
                image_size=CLIP["image_size"], patch_size=CLIP["patch_size"],
                mlp_ratio=CLIP["intermediate_size"] / CLIP["hidden_size"])
    return {"architectures": ["UnlimitedOCRForCausalLM"], "model_type": "unlimited-ocr",
            "auto_map": {"AutoConfig": "modeling_unlimitedocr.UnlimitedOCRConfig",
                         "AutoModel": "modeling_unlimitedocr.UnlimitedOCRForCausalLM"},
            "sliding_window": window, "sliding_window_size": window, "candidate_resolutions": [[1024, 1024]],
            "global_view_pos": "head", "tile_tag": "2D", "torch_dtype": "float32", "language_config": lang,
            "image_token_id": IMAGE_TOKEN_ID,  # the real one is the default, 128815; the tiny vocabulary's is not
            "projector_config": {"input_dim": SAM["downsample_channels"][1] + CLIP["hidden_size"],
                                 "n_embed": TEXT["hidden_size"], "projector_type": "linear",
                                 "model_type": "mlp_projector"},
            "vision_config": {"image_size": SAM["image_size"], "model_type": "vision", "model_name": "deeplip_b_l",
                              "width": {"sam_vit_b": sam, "clip-l-14-224": clip}}}


def make_checkpoint(out_dir, layout="transformers", window=WINDOW, seed=0, text=None):
    """The tiny model saved by save_pretrained (its weights under the hub's names), with a byte-level BPE tokenizer;
    layout "hub": config.json rewritten as the hub ships it (the tiny decoder sizes only). Returns out_dir."""
    from bench.tiny_bpe import write_bpe_tokenizer

    os.makedirs(out_dir, exist_ok=True)
    model = tiny_model(window, seed, text)
    model.generation_config.update(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=BOS + 8)
    model.save_pretrained(out_dir)
    write_bpe_tokenizer(os.path.join(out_dir, "tokenizer.json"), BPE_VOCAB, SPECIALS, seed, bos=SPECIALS[0])
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": SPECIALS[0], "eos_token": SPECIALS[1], "pad_token": SPECIALS[8],
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, ensure_ascii=False, indent=1)
    if layout == "hub":
        with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
            json.dump(hub_config(window), f, indent=1)
    return out_dir


def reference_inputs(prep):
    """transformers' inputs for our processor's output (`prep`: its dict): ids, global views, tiles and grids."""
    import torch
    views = prep["views"]
    tiles = [t for t, _, _ in views if t is not None]
    return dict(input_ids=torch.tensor(np.asarray(prep["input_ids"]))[None],
                pixel_values=torch.tensor(np.concatenate([g for _, _, g in views])),
                pixel_values_local=torch.tensor(np.concatenate(tiles)) if tiles else None,
                num_local_patches=[0 if t is None else t.shape[0] for t, _, _ in views],
                patches_grid=[list(grid) if grid is not None else [0, 0] for _, grid, _ in views])


def reference_generate(model, inputs, new_tokens):
    """Greedy tokens and every step's logits [N, V] of transformers' generate, run to `new_tokens` with no eos (not
    min_new_tokens: that would mask the eos logit, which ours, run with ignore_eos, keeps)."""
    import copy

    import torch
    config = copy.deepcopy(model.generation_config)
    config.eos_token_id = TEXT["vocab_size"]  # no token: generate never stops early
    with torch.no_grad():
        out = model.generate(**inputs, generation_config=config, max_new_tokens=new_tokens, do_sample=False,
                             output_logits=True, return_dict_in_generate=True)
    n = inputs["input_ids"].shape[1]
    return out.sequences[0, n:].tolist(), torch.stack(out.logits, 1)[0].float().numpy()
