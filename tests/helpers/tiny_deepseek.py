"""Tiny random DeepSeek-OCR-2 models/checkpoints built with transformers (test-only)."""

import numpy as np

from bench.deepseek_tokens import BOS, BPE_VOCAB, EOS, IMAGE_TOKEN_ID, SPECIALS
from bench.tiny_bpe import write_bpe_tokenizer
from tests.helpers.parity import randomize_

# The query tables are fixed at 144 / 256 rows (12x12 / 16x16 SAM outputs), so the views keep their real
# sizes (768-px tiles, the 1024-px global view); the tiny widths keep them fast.
TILE, GLOBAL = 768, 1024
SAM = dict(hidden_size=32, output_channels=16, num_hidden_layers=4, num_attention_heads=2, image_size=1024,
           patch_size=16, window_size=14, global_attn_indexes=[1, 3], mlp_dim=64, downsample_channels=[24, 48])
ENCODER = dict(vocab_size=16, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
TEXT = dict(vocab_size=400, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=3,
            n_shared_experts=2, mlp_layer_types=["dense", "sparse", "sparse"], max_position_embeddings=2048,
            bos_token_id=BOS, eos_token_id=EOS, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def tiny_config():
    from transformers import DeepseekOcr2Config
    return DeepseekOcr2Config(vision_config=dict(sam_config=SAM, encoder_config=ENCODER), text_config=TEXT,
                              image_token_id=IMAGE_TOKEN_ID)


def tiny_model(seed=0):
    from transformers import DeepseekOcr2ForConditionalGeneration
    model = DeepseekOcr2ForConditionalGeneration(tiny_config()).eval()
    return randomize_(model, seed, vectors=lambda name: 1.0 if "view_separator" in name else None)


def view_inputs(sam, local, glob):
    """The per-view graph inputs (tiles first, then the global view) for our DeepSeek-OCR-2 vision."""
    from ms_ocr.models.deepseek_ocr2.vision import hybrid_visible
    views = []
    for pixels in ([local] if local is not None else []) + [glob]:
        size = pixels.shape[-1]
        tables = sam.tables(size // 16).arrays()
        p = (-(-size // 64)) ** 2
        q = 144 if p <= 144 else 256
        views.append((pixels, *tables, np.arange(p + q, dtype=np.int32)[None, None], hybrid_visible(p, q)))
    return views


def deepseek_ai_config():
    """The remote-code layout deepseek-ai/DeepSeek-OCR-2 ships (language_config / vision_config.width /
    projector_config), written by hand for the tiny model."""
    text = {k: v for k, v in TEXT.items() if k not in ("mlp_layer_types", "rope_parameters")}
    return {"architectures": ["DeepseekOCR2ForCausalLM"], "model_type": "deepseek_vl_v2",
            "language_config": {**text, "first_k_dense_replace": 1, "topk_method": "greedy", "use_mla": False,
                                "rope_theta": 10000.0, "kv_lora_rank": None, "q_lora_rank": None},
            "projector_config": {"input_dim": ENCODER["hidden_size"], "n_embed": TEXT["hidden_size"],
                                 "projector_type": "linear"},
            "vision_config": {"image_size": 1024, "width": {
                "sam_vit_b": {"width": SAM["hidden_size"], "layers": SAM["num_hidden_layers"],
                              "heads": SAM["num_attention_heads"], "global_attn_indexes": SAM["global_attn_indexes"],
                              "downsample_channels": SAM["downsample_channels"]},
                "qwen2-0-5b": {"dim": ENCODER["hidden_size"]}}},
            "image_token_id": 362}


def make_tiny_checkpoint(out_dir, dtype="float32", seed=0):
    """save_pretrained folder of a tiny DeepSeek-OCR-2 (hub weight names) with a byte-level BPE tokenizer."""
    import json
    import os

    import torch
    from transformers import DeepseekOcr2ImageProcessorPil

    os.makedirs(out_dir, exist_ok=True)
    model = tiny_model(seed).to(getattr(torch, dtype))
    model.generation_config.update(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=BOS + 8)
    model.save_pretrained(out_dir)
    DeepseekOcr2ImageProcessorPil().save_pretrained(out_dir)
    write_bpe_tokenizer(os.path.join(out_dir, "tokenizer.json"), BPE_VOCAB, SPECIALS, seed, bos=SPECIALS[0])
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": SPECIALS[0], "eos_token": SPECIALS[1], "pad_token": SPECIALS[8],
                   "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192,
                   "clean_up_tokenization_spaces": False}, f, ensure_ascii=False, indent=1)
    return out_dir


def reference_processor(folder):
    from transformers import AutoTokenizer, DeepseekOcr2ImageProcessorPil, DeepseekOcr2Processor
    return DeepseekOcr2Processor(image_processor=DeepseekOcr2ImageProcessorPil.from_pretrained(folder),
                                 tokenizer=AutoTokenizer.from_pretrained(folder))


def reference_inputs(ref, images, prompt):
    return ref(images=images, text="<image>\n" * len(images) + prompt, return_tensors="pt")


def reference_greedy(folder, images, prompt, max_new_tokens):
    import torch
    from transformers import DeepseekOcr2ForConditionalGeneration
    model = DeepseekOcr2ForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    inputs = reference_inputs(reference_processor(folder), images, prompt)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


# A second tiny model, made and saved the way a transformers user does it (the one of issue 23): the config names
# only the sizes it changes (SAM keeps image_size 1024, the Qwen2 encoder keeps transformers' default rope, the
# decoder is GQA with 8 experts, top-2, one shared expert), and DeepseekOcr2Processor.save_pretrained writes the
# tokenizer (a tokenizers-backed tokenizer that adds BOS) and processor_config.json (the nested image processor).
SAVED_SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<image>", "<｜▁pad▁｜>"]


def make_saved_checkpoint(out_dir, seed=1):
    """save_pretrained folder of the model, processor and tokenizer above; returns out_dir."""
    import os
    import tempfile

    from transformers import (DeepseekOcr2Config, DeepseekOcr2ForConditionalGeneration, DeepseekOcr2ImageProcessorPil,
                              DeepseekOcr2Processor, PreTrainedTokenizerFast)

    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "tokenizer.json")
        write_bpe_tokenizer(raw, 300, SAVED_SPECIALS, seed)
        bos, eos, image, pad = SAVED_SPECIALS
        tok = PreTrainedTokenizerFast(tokenizer_file=raw, bos_token=bos, eos_token=eos, pad_token=pad,
                                      add_bos_token=True)
    ids = {t: tok.convert_tokens_to_ids(t) for t in SAVED_SPECIALS}
    cfg = DeepseekOcr2Config(
        vision_config=dict(
            sam_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, global_attn_indexes=[1],
                            output_channels=16, downsample_channels=[24, 48]),
            encoder_config=dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2)),
        text_config=dict(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, moe_intermediate_size=32, n_routed_experts=8,
                         num_experts_per_tok=2, n_shared_experts=1, mlp_layer_types=["dense", "sparse"],
                         bos_token_id=ids[bos], eos_token_id=ids[eos], pad_token_id=ids[pad]),
        image_token_id=ids[image])
    model = DeepseekOcr2ForConditionalGeneration(cfg).eval()
    randomize_(model, seed, vectors=lambda name: 1.0 if "view_separator" in name else None)
    model.save_pretrained(out_dir)
    DeepseekOcr2Processor(image_processor=DeepseekOcr2ImageProcessorPil(), tokenizer=tok).save_pretrained(out_dir)
    return out_dir
