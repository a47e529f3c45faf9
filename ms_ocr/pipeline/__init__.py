"""The PaddleOCR-VL document pipeline on MindSpore: PP-DocLayoutV2 layout, region recognition by a VLM, Markdown and
JSON assembly. `python -m ms_ocr.pipeline --help`; Python API: DocumentPipeline (ms_ocr/pipeline/document.py)."""

from ms_ocr.pipeline.document import DocumentPipeline, PageResult
from ms_ocr.pipeline.markdown import Block

__all__ = ["Block", "DocumentPipeline", "PageResult"]
