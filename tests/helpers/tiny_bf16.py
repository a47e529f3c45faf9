"""Tiny bf16 checkpoints of the three VLMs the bf16 tests load (PaddleOCR-VL, HunyuanOCR, DeepSeek-OCR-2)."""

BF16_MODELS = ("paddleocr-vl", "hunyuan-ocr", "deepseek-ocr2")


def tiny_bf16_model(name, request):
    """(model package, tiny bf16 checkpoint folder, a prompt) of `name` (one of BF16_MODELS), through the test's
    `request` (the session's checkpoint fixtures)."""
    if name == "deepseek-ocr2":
        from ms_ocr.models.deepseek_ocr2 import SPEC as deepseek_ocr2
        from tests.helpers.tiny_deepseek import make_tiny_checkpoint
        folder = make_tiny_checkpoint(str(request.getfixturevalue("tmp_path_factory").mktemp("ds2_bf16")),
                                      dtype="bfloat16")
        return deepseek_ocr2, folder, deepseek_ocr2.tasks["ocr"]
    if name == "paddleocr-vl":
        from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
        return paddleocr_vl, request.getfixturevalue("tiny_checkpoint")("hub", "json", "bfloat16", "100KB"), "OCR:"
    from ms_ocr.models.hunyuan_vl import SPEC as hunyuan_vl
    return (hunyuan_vl, request.getfixturevalue("hunyuan_checkpoint")("transformers", "bfloat16"),
            hunyuan_vl.tasks["ocr"])
