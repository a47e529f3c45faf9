"""PaddleOCR-VL's declaration (ms_ocr.models.spec.ModelSpec)."""

from ms_ocr.models.spec import ModelSpec

SPEC = ModelSpec(
    name="paddleocr-vl",
    package="paddleocr_vl",
    title="PaddleOCR-VL 0.9B: NaViT SigLIP + mlp_AR projector + ERNIE-4.5-0.3B",
    aliases=("paddleocr_vl",),
    hub_id="PaddlePaddle/PaddleOCR-VL",
    tasks={"ocr": "OCR:", "table": "Table Recognition:", "formula": "Formula Recognition:",
           "chart": "Chart Recognition:"},
    region_tasks={"text": "ocr", "table": "table", "formula": "formula", "chart": "chart"},
    config="config:PaddleOCRVLConfig",
    processor="processor:PaddleOCRVLProcessor",
    model="model:PaddleOCRVLModel",
)
