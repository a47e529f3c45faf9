"""PaddleOCR-VL's declaration (ms_ocr.models.spec.ModelSpec)."""

from ms_ocr.models.spec import ModelSpec

_HERE = "ms_ocr.models.paddleocr_vl"

SPEC = ModelSpec(
    name="paddleocr-vl",
    package="paddleocr_vl",
    title="PaddleOCR-VL 0.9B: NaViT SigLIP + mlp_AR projector + ERNIE-4.5-0.3B",
    aliases=("paddleocr_vl",),
    hub_id="PaddlePaddle/PaddleOCR-VL",
    tasks={"ocr": "OCR:", "table": "Table Recognition:", "formula": "Formula Recognition:",
           "chart": "Chart Recognition:"},
    region_tasks={"text": "ocr", "table": "table", "formula": "formula", "chart": "chart"},
    config=f"{_HERE}.config:PaddleOCRVLConfig",
    processor=f"{_HERE}.processor:PaddleOCRVLProcessor",
    model=f"{_HERE}.model:PaddleOCRVLModel",
    rename=f"{_HERE}.convert:name_table",
    vision_inputs=f"{_HERE}.host:vision_inputs",
)
