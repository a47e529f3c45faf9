"""PaddleOCR-VL's declaration (ms_ocr.models.spec.ModelSpec)."""

from ms_ocr.models.spec import ModelSpec

SPEC = ModelSpec(
    name="paddleocr-vl",
    package="paddleocr_vl",
    title="PaddleOCR-VL 0.9B: NaViT SigLIP + mlp_AR projector + ERNIE-4.5-0.3B",
    aliases=("paddleocr_vl",),
    hub_id="PaddlePaddle/PaddleOCR-VL",
    # the prompts of PaddleX 3.4's pipeline; spotting and seal are PaddleOCR-VL-1.5's (1.0 was not trained on them)
    tasks={"ocr": "OCR:", "table": "Table Recognition:", "formula": "Formula Recognition:",
           "chart": "Chart Recognition:", "spotting": "Spotting:", "seal": "Seal Recognition:"},
    box_tasks=("spotting",),
    region_tasks={"text": "ocr", "table": "table", "formula": "formula", "chart": "chart"},
    # PaddleX 3.4 (pipelines/paddleocr_vl/pipeline.py): spotting images at 112,896..1,605,632 pixels, upscaled 2x
    # below 1,500 px a side first, and decoded with the special tokens kept (its boxes are <|LOC_n|> tokens)
    task_pixels={"spotting": (112896, 1605632)},
    task_image="host:task_image",
    special_token_tasks=("spotting",),
    postprocess="host:postprocess",
    line_reader=True,  # the demo checkpoint (ms_ocr/demo/paddleocr_vl) reads single text lines
    config="config:PaddleOCRVLConfig",
    processor="processor:PaddleOCRVLProcessor",
    model="model:PaddleOCRVLModel",
)
