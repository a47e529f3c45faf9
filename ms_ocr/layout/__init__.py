"""The document layout models: PP-DocLayoutV2, V3 and V4 (transformers' pp_doclayout_v2/v3/v4), sharing the HGNetV2
backbone, hybrid encoder and RT-DETR decoder; a checkpoint folder's config.json model_type picks the version.
`LayoutDetector(folder)` (or `load_detector`) runs one on a page (see README.md)."""

from ms_ocr.config_utils import CheckpointError
from ms_ocr.layout.loading import SPECS, config_from_dir, load_model, spec_for
from ms_ocr.layout.runner import LayoutBlock, LayoutDetector, PageLayout


def load_detector(model_dir, threshold=None, mode="graph"):
    """A LayoutDetector for any supported checkpoint folder."""
    return LayoutDetector(model_dir, threshold, mode)


__all__ = ["SPECS", "CheckpointError", "LayoutBlock", "LayoutDetector", "PageLayout", "config_from_dir",
           "load_detector", "load_model", "spec_for"]
