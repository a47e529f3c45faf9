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
    sam = SamEncoder(**sam_kwargs())
    load_weights(sam, weights("sam_model."), lambda n: n, source="golden")
    return sam
