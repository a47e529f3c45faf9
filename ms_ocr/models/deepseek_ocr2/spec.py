"""DeepSeek-OCR-2's declaration (ms_ocr.models.spec.ModelSpec)."""

from ms_ocr.models.spec import ModelSpec

SPEC = ModelSpec(
    name="deepseek-ocr2",
    package="deepseek_ocr2",
    title="DeepSeek-OCR-2: SAM + Qwen2 query encoder + DeepSeek MoE decoder",
    aliases=("deepseek-ocr-2", "deepseek_ocr2"),
    hub_id="deepseek-ai/DeepSeek-OCR-2",
    # DeepSeek-OCR's documented prompts (after the "<image>\n" the processor puts first)
    tasks={"ocr": "Free OCR.", "markdown": "<|grounding|>Convert the document to markdown.",
           "figure": "Parse the figure.", "describe": "Describe this image in detail."},
    region_tasks={"text": "ocr", "table": "markdown", "formula": "ocr", "chart": "figure"},  # as DeepSeek-OCR
    config="config:DeepseekOCR2Config",
    processor="processor:DeepseekOCR2Processor",
    model="model:DeepseekOCR2Model",
)
