"""DeepSeek-OCR's declaration (ms_ocr.models.spec.ModelSpec)."""

from ms_ocr.models.spec import ModelSpec

SPEC = ModelSpec(
    name="deepseek-ocr",
    package="deepseek_ocr",
    title="DeepSeek-OCR (v1, 3B MoE): DeepEncoder (SAM + CLIP-L) + DeepSeek MoE decoder",
    aliases=("deepseek_ocr",),
    hub_id="deepseek-ai/DeepSeek-OCR",
    tasks={"ocr": "Free OCR.", "markdown": "<|grounding|>Convert the document to markdown.",
           "grounding": "<|grounding|>OCR this image.", "figure": "Parse the figure.",
           "describe": "Describe this image in detail."},
    box_tasks=("markdown", "grounding"),
    # no table or formula prompt: tables go through its Markdown conversion (HTML tables), formulas through free
    # OCR (LaTeX between \\[ \\])
    region_tasks={"text": "ocr", "table": "markdown", "formula": "ocr", "chart": "figure"},
    modes=("tiny", "small", "base", "large", "gundam"),  # processor.MODES: (global view, tile size, tiles)
    default_mode="gundam",
    # the official scripts' n-gram blocking (ngram 30 within 90 generated tokens, table cells exempt)
    no_repeat={"size": 30, "window": 90, "exempt_tokens": ("<td>", "</td>")},
    config="config:DeepseekOCRConfig",
    processor="processor:DeepseekOCRProcessor",
    model="model:DeepseekOCRModel",
    postprocess="host:postprocess",
)
