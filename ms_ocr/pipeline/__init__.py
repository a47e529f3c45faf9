"""The PaddleOCR-VL document pipeline on MindSpore (versions 1.0, 1.5, 1.6 and 1.8): PP-DocLayoutV2/V3/V4 layout,
region recognition by a VLM, Markdown and JSON assembly. `python -m ms_ocr.pipeline --help`; Python API:
DocumentPipeline (ms_ocr/pipeline/document.py), the versions' settings in ms_ocr/pipeline/versions.py."""

from ms_ocr.pipeline.document import DocumentPipeline
from ms_ocr.pipeline.markdown import Block
from ms_ocr.pipeline.result import PageResult

__all__ = ["Block", "DocumentPipeline", "PageResult"]
