"""Rewrite a tiny checkpoint folder into another layout real checkpoints ship, keeping the model the same.

Each function changes one thing the published files vary (where the chat template sits, which processor file
holds the image settings, the rope key, sharding and dtype of the weights, tied or untied head, the eos list)
and works on any of our models' folders, so a model's matrix is a list of variants, not a copy of test code.
"""

import json
import os

from bench.references import chat_template


def read_json(folder, name):
    with open(os.path.join(folder, name), encoding="utf-8") as f:
        return json.load(f)


def write_json(folder, name, obj):
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)


def _exists(folder, name):
    return os.path.isfile(os.path.join(folder, name))


def move_template(folder, where):
    """Put the chat template in exactly one place: "jinja" (chat_template.jinja, transformers 5), "json"
    (chat_template.json, transformers 4.4x) or "tokenizer_config" (the hub's original files)."""
    template = chat_template(folder)
    for name in ("chat_template.jinja", "chat_template.json"):
        if _exists(folder, name):
            os.remove(os.path.join(folder, name))
    tok = read_json(folder, "tokenizer_config.json")
    tok.pop("chat_template", None)
    if where == "tokenizer_config":
        tok["chat_template"] = template
    elif where == "json":
        write_json(folder, "chat_template.json", {"chat_template": template})
    elif where == "jinja":
        with open(os.path.join(folder, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(template)
    else:
        raise ValueError(where)
    write_json(folder, "tokenizer_config.json", tok)


def move_image_settings(folder, name):
    """Image processor settings in preprocessor_config.json (flat) or processor_config.json (transformers 5's
    processor file, settings under "image_processor"), moved from wherever they are."""
    if name == "preprocessor_config.json":
        if _exists(folder, "processor_config.json"):  # transformers 5's nested file -> the flat one
            nested = read_json(folder, "processor_config.json")
            os.remove(os.path.join(folder, "processor_config.json"))
            write_json(folder, "preprocessor_config.json", nested["image_processor"])
        return
    settings = read_json(folder, "preprocessor_config.json")
    os.remove(os.path.join(folder, "preprocessor_config.json"))
    write_json(folder, "processor_config.json", {"image_processor": settings})


def set_version(folder, version):
    """A later release's published differences from the files the builder writes. HunyuanOCR "hunyuan-1.5"
    (docs/model-versions.md, section 4.2, as oar-ocr derived it from the files): the nested text_config with its
    fields also at the root, and vision_config.max_vit_seq_len 65,536. PaddleOCR-VL "1.5"
    (docs/model-versions.md, section 1): the chat template ends the prompt with "Assistant:\n" instead of
    "Assistant: " (PaddleX 3.4's PaddleOCR-VL-1.5-0.9B.jinja against PaddleOCR-VL-0.9B.jinja: those two lines), and
    the hub's preprocessor_config.json names its remote classes in an auto_map."""
    if version == "hunyuan-1.5":
        config = read_json(folder, "config.json")
        for key, value in config["text_config"].items():  # "the text fields remain duplicated at the top level"
            config.setdefault(key, value)
        config["vision_config"]["max_vit_seq_len"] = 65536
        write_json(folder, "config.json", config)
        return
    if version != "1.5":
        raise ValueError(version)
    template = chat_template(folder)
    assert template.count('"Assistant: "') == 2, template
    for name in ("chat_template.jinja", "chat_template.json"):
        if _exists(folder, name):
            os.remove(os.path.join(folder, name))
    tok = read_json(folder, "tokenizer_config.json")
    tok.pop("chat_template", None)
    write_json(folder, "tokenizer_config.json", tok)
    with open(os.path.join(folder, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(template.replace('"Assistant: "', '"Assistant:\n"'))
    settings = read_json(folder, "preprocessor_config.json")
    settings["auto_map"] = {"AutoImageProcessor": "image_processing_paddleocr_vl.PaddleOCRVLImageProcessor",
                            "AutoProcessor": "processing_paddleocr_vl.PaddleOCRVLProcessor"}
    write_json(folder, "preprocessor_config.json", settings)


def _text_level(config):
    """The dict that holds the decoder's keys: text_config / language_config, or the root (flat files)."""
    return config.get("text_config") or config.get("language_config") or config


def rename_rope(folder, key):
    """Name the rope settings `rope_scaling` (transformers 4 and the hub files) or `rope_parameters`
    (transformers 5), moving rope_theta as each version writes it."""
    config = read_json(folder, "config.json")
    level = _text_level(config)
    params = dict(level.pop("rope_parameters", None) or level.pop("rope_scaling", None) or {})
    if key == "rope_scaling":
        if "rope_theta" in params:
            level["rope_theta"] = params.pop("rope_theta")
        params.setdefault("type", params.get("rope_type", "default"))
    else:
        if "rope_theta" in level:
            params["rope_theta"] = level.pop("rope_theta")
        params.setdefault("rope_type", params.pop("type", "default"))
    level[key] = params
    write_json(folder, "config.json", config)


def _state(folder):
    from safetensors.torch import load_file

    state = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            state.update(load_file(os.path.join(folder, name)))
            os.remove(os.path.join(folder, name))
    if _exists(folder, "model.safetensors.index.json"):
        os.remove(os.path.join(folder, "model.safetensors.index.json"))
    return state


def _save(folder, state, shard):
    from huggingface_hub import save_torch_state_dict

    save_torch_state_dict(state, folder, max_shard_size=shard or "50GB", metadata={"format": "pt"})


def _embed_name(state):
    (name,) = [k for k in state if k.endswith("embed_tokens.weight") and "vision" not in k and "qwen2" not in k]
    return name


def _set_tie(folder, value):
    config = read_json(folder, "config.json")
    config["tie_word_embeddings"] = value
    level = _text_level(config)
    if level is not config:
        level["tie_word_embeddings"] = value
    write_json(folder, "config.json", config)


def set_head(folder, mode, seed=11):
    """"tied": no lm_head in the weights, tie flags true; "untied": an lm_head of its own, flags false;
    "own_head_flag_tied": an lm_head of its own with the flags true (the hub's PaddleOCR-VL file: transformers
    loads the head it finds); "copy_head_flag_tied": lm_head stored as a copy of the embeddings, flags true."""
    import torch

    state = _state(folder)
    embed = state[_embed_name(state)]
    if mode == "tied":
        state.pop("lm_head.weight", None)
    elif mode == "copy_head_flag_tied":
        state["lm_head.weight"] = embed.clone()
    elif mode in ("untied", "own_head_flag_tied"):
        head = state.get("lm_head.weight")
        if head is None or torch.equal(head, embed):
            g = torch.Generator().manual_seed(seed)
            state["lm_head.weight"] = (torch.randn(embed.shape, generator=g) * 0.2).to(embed.dtype)
    else:
        raise ValueError(mode)
    _save(folder, state, None)
    _set_tie(folder, mode != "untied")


def set_weights(folder, dtype, shard=None):
    """Store the weights as `dtype` ("float32" / "bfloat16"), in one file or shards of `shard` with an index;
    config.json's dtype follows."""
    import torch

    state = {k: (v.to(getattr(torch, dtype)) if v.is_floating_point() else v) for k, v in _state(folder).items()}
    _save(folder, state, shard)
    config = read_json(folder, "config.json")
    for key in ("dtype", "torch_dtype"):
        if key in config:
            config[key] = dtype
    write_json(folder, "config.json", config)


def set_eos(folder, eos_ids):
    """generation_config.json's eos_token_id (what both runtimes stop on)."""
    config = read_json(folder, "generation_config.json") if _exists(folder, "generation_config.json") else {}
    config["eos_token_id"] = list(eos_ids)
    write_json(folder, "generation_config.json", config)


def apply(folder, variant):
    """Apply a variant's layout keys (see tests/matrix/models.py) to a built folder."""
    if "head" in variant:
        set_head(folder, variant["head"])
    if "weights" in variant:
        set_weights(folder, *variant["weights"])
    if "rope" in variant:
        rename_rope(folder, variant["rope"])
    if "version" in variant:
        set_version(folder, variant["version"])
    if "template" in variant:
        move_template(folder, variant["template"])
    if "image_settings" in variant:
        move_image_settings(folder, variant["image_settings"])
    return folder
