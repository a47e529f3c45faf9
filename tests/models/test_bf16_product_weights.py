"""--dtype bf16 with products in bf16 (a CPU with bf16 dot products): every linear layer's matrix stays bf16 on load,
not only the decoder's and the ViT layers' (plan.bf16_resident) but the projectors, HunyuanOCR's merger, the patch
embeddings and DeepSeek's DeepEncoder too, so they are multiplied in bf16 (GemmBf16) as transformers' bf16 autocast
does; norms, tables and SAM's neck convolutions stay fp32. Products off (--dtype auto, the exact path): the
projectors stay fp32."""

import pytest
import mindspore as ms

from ms_ocr import plan
from ms_ocr.nn import Linear, PatchEmbed
from ms_ocr.nn.sam import PatchConv
from ms_ocr.runtime import Buckets
from tests.helpers.native import needs_compiler
from tests.helpers.tiny_bf16 import BF16_MODELS, tiny_bf16_model


# a Linear outside the decoder and the ViT layers, per model
PROJECTOR = {"paddleocr-vl": "mlp_AR.linear_1.weight", "hunyuan-ocr": "vit.perceive.mlp.weight",
             "deepseek-ocr2": "vision.projector.layers.weight"}


# a stride == kernel convolution (4-D weight) per model: the patch embedding, HunyuanOCR's merger, SAM's patch conv
CONVOLUTION = {"paddleocr-vl": "visual.vision_model.embeddings.patch_embedding.weight",
               "hunyuan-ocr": "vit.perceive.proj.0.weight", "deepseek-ocr2": "vision.sam_model.patch_embed.proj.weight"}


@needs_compiler
@pytest.mark.parametrize("name", BF16_MODELS)
def test_every_linear_matrix_stays_bf16_when_products_run_in_bf16(name, request, graph_mode, monkeypatch):
    spec, folder, _ = tiny_bf16_model(name, request)
    exact = spec.load(folder, "CPU", "auto", Buckets(prefill=32, slots=64)).runtime.model
    assert {p.name: p.dtype for p in exact.get_parameters()}[PROJECTOR[name]] == ms.float32
    # as on a CPU with bf16 dot products (the plan says so; its kernels stay the exact ones)
    monkeypatch.setattr(plan, "bf16_products", lambda dtype, target, kernels: kernels)
    model = spec.load(folder, "CPU", "bf16", Buckets(prefill=32, slots=64)).runtime.model
    params = {p.name: p for p in model.get_parameters() if not p.name.endswith("_cache")}
    linears = {cell.weight.name for _, cell in model.cells_and_names()
               if isinstance(cell, (Linear, PatchEmbed, PatchConv))}
    assert PROJECTOR[name] in linears and CONVOLUTION[name] in linears and len(params[CONVOLUTION[name]].shape) == 4
    if name == "deepseek-ocr2":  # the DeepEncoder: SAM's and the query encoder's projections
        assert any(n.startswith("vision.sam_model.blocks.") for n in linears)
        assert any(n.startswith("vision.qwen2_model.") for n in linears)
    for n in linears:
        assert params[n].dtype == ms.bfloat16, n
    others = [n for n in params if n not in model.bf16_weight_names() | linears]
    assert others and all(params[n].dtype == ms.float32 for n in others)
    if name == "deepseek-ocr2":  # SAM's neck convolutions (Conv2d) stay fp32
        assert any(len(params[n].shape) == 4 for n in others)
