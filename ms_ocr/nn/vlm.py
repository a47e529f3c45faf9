"""The model Cell every VLM shares (interfaces.VLMModel): a CausalDecoder under `model` and an optional untied
`lm_head` (VLMCell), and the two kinds of vision tower a model declares by its base class: a ViT stack
(ViTStackModel) or views run by the model itself (ViewsModel; nn/deepencoder.py DeepEncoderModel). The runtime and
the exporters dispatch on these classes."""

from mindspore import nn

from ms_ocr import ops as K
from ms_ocr.convert.loader import is_state
from ms_ocr.nn.layers import Linear
from ms_ocr.nn.patch import PatchEmbed
from ms_ocr.nn.sam import PatchConv


class VLMCell(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tied = cfg.text.tie_word_embeddings
        if not self.tied:
            self.lm_head = Linear(cfg.text.hidden_size, cfg.text.vocab_size, bias=False)
        self.num_kv_heads = cfg.text.num_key_value_heads
        # None: full causal attention; W: the decoder's reference sliding window (nn/decoder.py), whose caches the
        # runtime lays out as prompt + a ring of W slots (runtime/window.py)
        self.attention_window = None
        # set by the loader when the text weights stay bf16 on the CPU (bf16_weight_names): embeddings are
        # gathered in bf16 and widened
        self.widen_embeddings = False
        self.head_quantized = False  # --quantize int8 (models/quantize.py): the head's matrix int8, with weight_scale

    def bf16_weight_names(self):
        """The Parameters a bf16 checkpoint keeps in bf16 on the CPU (plan.bf16_resident): the decoder layers'
        weights, which a decode step's native DecodeLayer reads as bf16 and the prefill layer graphs widen as
        they run (F.widen), the ViT layers' weights (widened once per layer, runtime.vision.VisionEncoder.layer), and
        the embeddings / head (the native MatMulT reads the head as bf16; the gathered embedding rows are widened).
        MoE layers' weights too (router, stacked experts, shared experts): their graphs widen the weights they
        use, the selected experts only, next to each product (ops.linear.matmul_t, nn.moe). Empty when a dense
        layer's MLP is not SiLU-gated (the native kernel does not serve it): fp32 weights then."""
        layers = self.text_layers()
        if any(not layer.moe and not layer.silu_mlp for layer in layers):
            return set()
        names = {p.name for layer in layers + self.vision_layers() for p in layer.get_parameters()
                 if not is_state(p.name)}
        names.add(self.model.embed_tokens.weight.name)
        if not self.tied:
            names.add(self.lm_head.weight.name)
        return names

    def bf16_product_weight_names(self):
        """With products in bf16 (--dtype bf16 where the CPU has bf16 dot products, plan.bf16_products): the
        matrices of every linear layer, those bf16_weight_names leaves out too (the projectors and HunyuanOCR's
        merger, the patch embeddings, DeepSeek's DeepEncoders: their products go through F.linear, or for the
        stride == kernel convolutions' 4-D weights ops.linear.linear_conv, which multiply a bf16 matrix in bf16 as
        they do the ViT layers'), instead of copies widened to fp32 at load."""
        kinds = (Linear, PatchEmbed, PatchConv)
        return {cell.weight.name for _, cell in self.cells_and_names() if isinstance(cell, kinds)}

    def text_layers(self):
        return list(self.model.layers)

    def embed(self, input_ids):
        if self.head_quantized and self.tied:  # --quantize int8, tied head: an int8 table, rows dequantised
            table = self.model.embed_tokens
            return K.embedding_rows_q8(table.weight, table.weight_scale, input_ids)
        if self.widen_embeddings:  # a bf16 table on the CPU: rows widened to fp32 (native GatherRows)
            return K.embedding_rows(self.kernels, self.model.embed_tokens.weight, input_ids)
        return self.model.embed_tokens(input_ids)

    def text_rotary(self, pos):
        return self.model.rotary(pos)

    def text(self, x, pos, cache_pos, slot_ids):
        return self.model(x, pos, cache_pos, slot_ids)

    def text_read_only(self, x, pos, cache_pos, slot_ids, caches=None):
        return self.model.read_only_step(x, pos, cache_pos, slot_ids, caches)

    def text_read_only_inputs(self, pos, cache_pos, slot_ids):
        return self.model.read_only_step_inputs(pos, cache_pos, slot_ids)

    def final_norm(self, h):
        return self.model.norm(h)

    def logits(self, h):
        if self.head_quantized:
            head = self.model.embed_tokens if self.tied else self.lm_head
            return K.matmul_t_q8(self.kernels, h, head.weight, head.weight_scale)
        weight = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        return K.matmul_t(self.kernels, h, weight)

    def allocate_cache(self, batch, slots, dtype, flat=True):
        for layer in self.text_layers():
            layer.self_attn.allocate_cache(batch, slots, dtype, flat)


class ViTStackModel(VLMCell):
    """A VLM whose vision tower is a stack of ViTLayers (interfaces.ViTStackTower): a subclass provides
    `vision_embed(*embed arrays)`, `vision_layers()` and `vision_head(x, *head arrays)`; the runtime runs the layers
    block by block (runtime/vision.py), the MindIR export as one graph."""


class ViewsModel(VLMCell):
    """A VLM whose vision tower runs views of an image itself (interfaces.ViewsTower): a subclass provides
    `encode_views(encoder, vision_inputs)`, `view_step()`, `assemble_step()` and `view_args(pixels)`, and no ViT
    layer stack."""

    def vision_layers(self):
        return []
