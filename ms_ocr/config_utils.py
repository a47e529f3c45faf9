"""Helpers that normalise the config.json layouts real checkpoints ship."""

import json
import os
from dataclasses import dataclass


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be used as given (missing file, wrong model, bad weights)."""


def read_json(path):
    """A checkpoint's JSON file; every one we read (config, tokenizer and processor settings) is an object."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path} is not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(data), "a number")
        raise CheckpointError(f"{path} holds {kind}, not a JSON object {{...}} of settings")
    return data


def load_config_json(model_dir):
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        raise CheckpointError(f"no config.json in {model_dir}")
    return read_json(path)


def require_model_type(raw, accepted, model_name):
    model_type = raw.get("model_type")
    if model_type not in accepted:
        raise CheckpointError(f"checkpoint has model_type {model_type!r}, not a {model_name} checkpoint "
                              f"(expected {', '.join(accepted)})")


def normalise_rope(raw):
    """Fold `rope_parameters` / `rope_scaling` / flat `rope_theta` into flat `rope_theta` (+ sections)."""
    out = {}
    for key in ("rope_scaling", "rope_parameters"):
        params = raw.get(key)
        if isinstance(params, dict):
            if "rope_theta" in params:
                out["rope_theta"] = params["rope_theta"]
            if "mrope_section" in params:
                out["mrope_section"] = list(params["mrope_section"])
            for extra in ("alpha", "xdrope_section", "type", "rope_type", "factor"):
                if extra in params:
                    out[f"rope_{extra}" if not extra.startswith("rope_") else extra] = params[extra]
    if "rope_theta" in raw and "rope_theta" not in out:
        out["rope_theta"] = raw["rope_theta"]
    return out


def pick(raw, names, defaults, where):
    """Keep the known fields; take reference defaults for omitted ones; fail loudly on anything else."""
    out = {}
    missing = []
    for name in names:
        if name in raw and raw[name] is not None:
            out[name] = raw[name]
        elif name in defaults:
            out[name] = defaults[name]
        else:
            missing.append(name)
    if missing:
        raise CheckpointError(f"{where} lacks required field(s): {', '.join(missing)}")
    return out


@dataclass
class DecoderTextConfig:
    """The fields every dense decoder's text config has, under transformers' names; a model's TextConfig adds its
    own (bias flags, rope variant)."""
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    hidden_act: str
    max_position_embeddings: int
    rms_norm_eps: float
    head_dim: int
    tie_word_embeddings: bool
    eos_token_id: object
    bos_token_id: object
    pad_token_id: object


@dataclass
class VisionTowerConfig:
    """The fields every ViT tower's config has (transformers' names); a model's VisionConfig adds its own."""
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_channels: int
    patch_size: int
    spatial_merge_size: int
    hidden_act: str
