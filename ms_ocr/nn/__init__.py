"""Shared Cells with Hugging Face parameter names."""

from ms_ocr.nn.attention import KVCacheAttention, VisionSelfAttention, cache_write_index, causal_cache_mask
from ms_ocr.nn.blocks import DecoderLayer, ViTLayer
from ms_ocr.nn.decoder import CausalDecoder
from ms_ocr.nn.layers import Embedding, LayerNorm, Linear, RMSNorm, zeros_param
from ms_ocr.nn.mlp import MLP, GatedMLP
from ms_ocr.nn.patch import PatchEmbed, PatchEmbeddings
from ms_ocr.nn.rope import MultiAxisRotary, VisionRotary2D, rope_inv_freq, section_selector
