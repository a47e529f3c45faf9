"""Unlimited-OCR's declaration (ms_ocr.models.spec.ModelSpec)."""

from ms_ocr.models.spec import ModelSpec

SPEC = ModelSpec(
    name="unlimited-ocr",
    package="unlimited_ocr",
    title="Unlimited-OCR (3B MoE): DeepSeek-OCR v1's design with reference sliding-window attention",
    aliases=("unlimited_ocr",),
    hub_id="baidu/Unlimited-OCR",
    # its two documented prompts (after the "<image>" the processor puts first)
    tasks={"ocr": "document parsing.", "multipage": "Multi page parsing."},
    box_tasks=("ocr", "multipage"),
    region_tasks={"text": "ocr", "table": "ocr", "formula": "ocr", "chart": "ocr"},
    modes=("tiny", "small", "base", "large", "gundam"),  # DeepSeek-OCR's (processing/deepencoder_v1.py MODES)
    default_mode="gundam",
    # its client's blocking: ngram 35 within 128 tokens, nothing exempt (1024 for several pages: --no-repeat-window)
    no_repeat={"size": 35, "window": 128, "exempt_tokens": ()},
    config="config:UnlimitedOCRConfig",
    processor="processor:UnlimitedOCRProcessor",
    model="model:UnlimitedOCRModel",
    postprocess="host:postprocess",
)
