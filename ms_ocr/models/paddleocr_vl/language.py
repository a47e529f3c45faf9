"""ERNIE-4.5-0.3B decoder with 3D MRoPE (reference: transformers PaddleOCRTextModel)."""

from mindspore import nn

from ms_ocr.nn import DecoderLayer, Embedding, MultiAxisRotary, RMSNorm, cache_write_index, causal_cache_mask


class TextModel(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.CellList([
            DecoderLayer(cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                         cfg.head_dim, cfg.rms_norm_eps, cfg.hidden_act)
            for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = MultiAxisRotary(cfg.head_dim, cfg.rope_theta, cfg.mrope_section, num_axes=3)
        self.num_kv_heads = cfg.num_key_value_heads

    def construct(self, x, pos, cache_pos):
        """Cached forward (decode): x [B, S, H]; pos [3, B, S] rope positions; cache_pos [B, S] slots.
        Returns the last layer's output before the final norm."""
        b = x.shape[0]
        slots = self.layers[0].self_attn.k_cache.shape[0] // (b * self.num_kv_heads)
        cos, sin = self.rotary(pos)
        write_idx = cache_write_index(cache_pos, self.num_kv_heads, slots)
        mask = causal_cache_mask(cache_pos, slots)
        for layer in self.layers:
            x = layer(x, cos, sin, write_idx, mask)
        return x
