"""The text-side interface every VLM Cell shares (see ms_ocr/steps.py): a CausalDecoder under `model`
and an optional untied `lm_head`. Model Cells add their vision tower and vision_embed / vision_head."""

from mindspore import nn, ops

from ms_ocr import ops as K
from ms_ocr.convert.loader import is_state
from ms_ocr.nn import Linear, PatchEmbed
from ms_ocr.nn.deepencoder import DeepEncoderViews, moe_decoder, run_views
from ms_ocr.nn.sam import PatchConv


class VLMCell(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tied = cfg.text.tie_word_embeddings
        if not self.tied:
            self.lm_head = Linear(cfg.text.hidden_size, cfg.text.vocab_size, bias=False)
        self.num_kv_heads = cfg.text.num_key_value_heads
        # set by the loader when the text weights stay bf16 on the CPU (bf16_weight_names): embeddings are
        # gathered in bf16 and widened
        self.widen_embeddings = False
        self.head_quantized = False  # --quantize int8 (models/quantize.py): the head's matrix int8, with weight_scale

    def bf16_weight_names(self):
        """The Parameters a bf16 checkpoint keeps in bf16 on the CPU (device.bf16_resident): the decoder layers'
        weights, which a decode step's native DecodeLayer reads as bf16 and the prefill layer graphs widen as
        they run (F.widen), the ViT layers' weights (widened once per layer, runtime.vision.VisionEncoder.layer), and the
        embeddings / head (the native MatMulT reads the head as bf16; the gathered embedding rows are widened).
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
        """With products in bf16 (--dtype bf16 where the CPU has bf16 dot products, device.bf16_products): the
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
            return K.embedding_rows(self.model.embed_tokens.weight, input_ids)
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
            return K.matmul_t_q8(h, head.weight, head.weight_scale)
        weight = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        return K.matmul_t(h, weight)

    def allocate_cache(self, batch, slots, dtype, flat=True):
        for layer in self.text_layers():
            layer.self_attn.allocate_cache(batch, slots, dtype, flat)


class DeepEncoderModel(VLMCell, DeepEncoderViews):
    """A DeepEncoder VLM (DeepSeek-OCR v1, v2): its `vision` Cell, the DeepSeek MoE decoder, and encode_views: per
    image, each view size (tiles as one batch, then the global view) through SAM block by block and the model's
    `post_step` (one compiled graph per size, kept under `steps_name`), then `assemble(item, views)` -> [M, H].
    A model sets host_view_args, post_step, steps_name and assemble."""

    post_step = None
    steps_name = None

    def __init__(self, cfg, vision):
        super().__init__(cfg)
        self.vision = vision
        self.model = moe_decoder(cfg.text)

    def assemble(self, item, views):
        raise NotImplementedError

    def encode_views(self, encoder, vision_inputs):
        out = [self.assemble(item, run_views(encoder, self.vision, self.post_step, self.steps_name, item.embed))
               for item in vision_inputs]
        return out[0] if len(out) == 1 else ops.concat(out, 0)
