"""Access to the DeepSeek-OCR v1 golden numbers in tests/data/deepseek_ocr_v1 (see tests/data/README.md)."""

import functools
import json
import os

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "deepseek_ocr_v1")


@functools.lru_cache(None)
def golden():
    return dict(np.load(os.path.join(ROOT, "deepencoder_tiny.npz")))


@functools.lru_cache(None)
def golden_bf16():
    """The official assembled image features with the DeepEncoder run under torch.autocast(bfloat16)."""
    return dict(np.load(os.path.join(ROOT, "deepencoder_tiny_bf16.npz")))


def base_page(path):
    """Save the golden 256-px view `in.base_global` (Base mode at this scale) as a PNG at `path`; returns path."""
    from PIL import Image
    Image.fromarray(golden()["in.base_global"][0].transpose(1, 2, 0)).save(path)
    return str(path)


@functools.lru_cache(None)
def tiny_config():
    with open(os.path.join(ROOT, "config_tiny.json")) as f:
        return json.load(f)


def pixels(u8):
    """The official ImageTransform: ToTensor (u8 / 255 in float32) then Normalize(0.5, 0.5)."""
    x = u8.astype(np.float32) / np.float32(255.0)
    return ((x - np.float32(0.5)) / np.float32(0.5)).astype(np.float32)


def sam_kwargs():
    c = tiny_config()["sam"]
    return dict(dim=c["embed_dim"], depth=c["depth"], heads=c["num_heads"], mlp_dim=c["embed_dim"] * c["mlp_ratio"],
                patch=c["patch_size"], image_size=c["img_size"], window=c["window_size"],
                global_layers=tuple(c["global_attn_indexes"]), out_channels=c["out_chans"],
                downsample=(tiny_config()["sam_net_2_out"], tiny_config()["sam_net_3_out"]))


def clip_kwargs():
    c = tiny_config()["clip"]
    return dict(dim=c["hidden_size"], heads=c["num_heads"], ffn=c["ffn_hidden_size"], layers=c["num_layers"],
                image_size=c["image_size"], patch=c["patch_size"], eps=c["layernorm_epsilon"])


def weights(prefix):
    """(name without `prefix`, array, tag) for every golden weight under `prefix`."""
    return [(k[2 + len(prefix):], v, "F32") for k, v in golden().items() if k.startswith("w." + prefix)]


def golden_sam():
    from ms_ocr.convert.loader import load_weights
    from ms_ocr.nn.sam import SamEncoder
    from tests.helpers.native import bound
    sam = bound(SamEncoder(**sam_kwargs()))
    load_weights(sam, weights("sam_model."), lambda n: n, source="golden")
    return sam


V1_TEXT = dict(vocab_size=400, hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=3,
               n_shared_experts=2, max_position_embeddings=2048, bos_token_id=360, eos_token_id=361)
V1_SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<image>", "<|grounding|>", "<|ref|>", "<|/ref|>",
               "<|det|>", "<|/det|>", "<｜▁pad▁｜>", "<td>", "</td>"]


def v1_config_json():
    """A deepseek-ai style config.json for the golden tiny DeepEncoder + a tiny MoE decoder (sizes the released
    file omits are given explicitly: SAM window/neck/table size)."""
    sam, clip = tiny_config()["sam"], tiny_config()["clip"]
    return {"architectures": ["DeepseekOCRForCausalLM"], "model_type": "deepseek_vl_v2",
            "language_config": {**V1_TEXT, "first_k_dense_replace": 1, "topk_method": "greedy", "use_mla": False,
                                "n_group": 1, "topk_group": 1, "kv_lora_rank": None, "q_lora_rank": None},
            "projector_config": {"input_dim": 128, "n_embed": 48, "projector_type": "linear"},
            "vision_config": {"image_size": sam["img_size"], "width": {
                "sam_vit_b": {"width": sam["embed_dim"], "layers": sam["depth"], "heads": sam["num_heads"],
                              "global_attn_indexes": sam["global_attn_indexes"], "downsample_channels": [32, 64],
                              "window_size": sam["window_size"], "out_chans": sam["out_chans"],
                              "image_size": sam["img_size"]},
                "clip-l-14-224": {"width": clip["hidden_size"], "heads": clip["num_heads"], "layers": clip["num_layers"],
                                  "image_size": clip["image_size"], "patch_size": clip["patch_size"]}}},
            "image_token_id": 362}


def v1_text_model(seed=7):
    """The reference MoE decoder (transformers DeepseekOcr2TextModel = v1's text config) and a random lm_head."""
    import torch
    from transformers import DeepseekOcr2TextConfig, DeepseekOcr2TextModel
    from tests.helpers.parity import randomize_
    cfg = DeepseekOcr2TextConfig(**V1_TEXT, mlp_layer_types=["dense", "sparse", "sparse"],
                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    model = randomize_(DeepseekOcr2TextModel(cfg).eval(), seed)
    head = torch.randn(V1_TEXT["vocab_size"], V1_TEXT["hidden_size"], generator=torch.Generator().manual_seed(seed)) * 0.2
    return model, head


def v1_text_model_from(folder):
    """The reference decoder and lm_head with the weights of the checkpoint `folder` (make_v1_checkpoint's layout;
    a dequantised copy of one, say): per-expert tensors stacked back into transformers' fused experts."""
    import torch
    from safetensors.torch import load_file
    text, _ = v1_text_model()
    saved = load_file(os.path.join(folder, "model.safetensors"))
    state = {k[len("model."):]: v for k, v in saved.items() if k.startswith("model.")}
    ours = {}
    for name in text.state_dict():
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            base, n = name.rsplit(".", 1)[0], text.state_dict()[name].shape[0]
            if name.endswith("gate_up_proj"):
                ours[name] = torch.stack([torch.cat([state[f"{base}.{e}.gate_proj.weight"],
                                                     state[f"{base}.{e}.up_proj.weight"]]) for e in range(n)])
            else:
                ours[name] = torch.stack([state[f"{base}.{e}.down_proj.weight"] for e in range(n)])
        else:
            ours[name] = state[name]
    text.load_state_dict(ours, strict=True)
    return text, saved["lm_head.weight"]


def v1_greedy(text, head, folder, feats, prompt, new_tokens, autocast=False, eos=None):
    """Greedy tokens and each step's logits [V] of the reference decoder (`text`, `head`) on the prompt
    <bos> <image> x len(feats) "\\n" `prompt` (the tokenizer of the checkpoint `folder`) with `feats` as the image's
    embeddings, for `new_tokens` steps or until `eos`; under bf16 autocast if asked."""
    import torch
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    feats = torch.tensor(feats)
    ids = [360] + [362] * feats.shape[0] + tok.encode("\n" + prompt, add_special_tokens=False).ids
    tokens, logits = [], []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        emb = text.embed_tokens(torch.tensor(ids)).float()
        emb[1:1 + feats.shape[0]] = feats
        for _ in range(new_tokens):
            h = text(inputs_embeds=emb[None]).last_hidden_state[0, -1]
            step = (h @ head.T).float()
            logits.append(step.numpy())
            tokens.append(int(step.argmax()))
            if tokens[-1] == eos:
                break
            emb = torch.cat([emb, text.embed_tokens(torch.tensor([tokens[-1]])).float()])
    return tokens, logits


def make_v1_checkpoint(out_dir, seed=7):
    """Golden DeepEncoder weights + a random tiny MoE decoder, under the hub's names (per-expert tensors)."""
    import os

    import torch
    from safetensors.torch import save_file
    from bench.tiny_bpe import write_bpe_tokenizer

    os.makedirs(out_dir, exist_ok=True)
    text, head = v1_text_model(seed)
    state = {f"model.{k[2:]}": torch.tensor(v) for k, v in golden().items() if k.startswith("w.")}
    for name, p in text.state_dict().items():
        if name.endswith("experts.gate_up_proj"):
            inter = p.shape[1] // 2
            for e in range(p.shape[0]):
                base = f"model.{name[:-len('gate_up_proj')]}{e}"
                state[f"{base}.gate_proj.weight"] = p[e, :inter].clone()
                state[f"{base}.up_proj.weight"] = p[e, inter:].clone()
        elif name.endswith("experts.down_proj"):
            for e in range(p.shape[0]):
                state[f"model.{name[:-len('down_proj')]}{e}.down_proj.weight"] = p[e].clone()
        else:
            state[f"model.{name}"] = p.detach().clone()
    state["lm_head.weight"] = head
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(v1_config_json(), f, indent=1)
    write_bpe_tokenizer(os.path.join(out_dir, "tokenizer.json"), 360, V1_SPECIALS, seed, bos=V1_SPECIALS[0])
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": V1_SPECIALS[0], "eos_token": V1_SPECIALS[1], "pad_token": V1_SPECIALS[8],
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, ensure_ascii=False)
    return out_dir, text, head
