"""The PaddleOCR-VL pipeline versions and what differs between them, in one table.

PaddleX 3.7.2 runs 1.0, 1.5 and 1.6 through one pipeline class; the versions differ only by their yaml
(`PaddleOCR-VL.yaml`, `PaddleOCR-VL-1.5.yaml`, `PaddleOCR-VL-1.6.yaml`) and by what their layout model returns
(PP-DocLayoutV2: boxes; PP-DocLayoutV3: boxes and polygons). 1.8 (PaddleX 3.8.0, PP-DocLayoutV4: quadrilaterals) is
not public as code: its row holds assumptions, marked `verified=False` (docs/deployment.md lists them)."""

from dataclasses import dataclass

from ms_ocr.errors import UsageError

# PaddleOCR-VL.yaml, by class id of the 25-label list: 0.4 for formulas, titles and text, 0.45 for seals, 0.5 else
V1_THRESHOLDS = {"display_formula": 0.4, "doc_title": 0.4, "inline_formula": 0.4, "paragraph_title": 0.4,
                 "text": 0.4, "vertical_text": 0.4, "seal": 0.45}
# layout_merge_bboxes_mode "large" (every yaml): a box at least 90 % inside one of these labels' boxes is dropped
CONTAINER_LABELS = ("chart", "display_formula", "doc_title", "inline_formula", "paragraph_title")
# what PaddleX 3.7.2 asks the VLM for every block when the caller sets no pixel bounds (pipeline.py)
PADDLEX_REGION_PIXELS = (112896, 1003520)


@dataclass(frozen=True)
class PipelineVersion:
    """One version's settings.

    `thresholds`: a {label: score} dict (labels not named: `default_threshold`) or one score for every label;
    `nms`: "box" (PaddleX's +1-pixel IoU on the boxes) or "quad" (IoU of the quadrilaterals); `shape`: how a block's
    outline is kept — "rect" (none: PP-DocLayoutV2), "auto" (PaddleX's choice of rectangle, minimum-area quad or
    the polygon), "as_detected" (the layout model's quadrilateral as it is); `region_pixels`: the (min, max) image
    pixels a PaddleOCR-VL recogniser is asked for, every task."""
    name: str
    layout_model_type: str
    layout_name: str  # the layout checkpoint, as its hub folder is called
    layout_hub_id: str
    yaml: str
    thresholds: object
    nms: str
    shape: str
    default_threshold: float = 0.5
    container_labels: tuple = CONTAINER_LABELS
    merge_blocks: bool = True
    region_pixels: tuple = PADDLEX_REGION_PIXELS
    verified: bool = True

    def threshold_table(self, labels, override=None):
        """{label: threshold} for every label of the layout checkpoint; `override` (one score) replaces them all,
        as PaddleX's layout_threshold does."""
        if override is not None:
            return {name: float(override) for name in labels}
        if isinstance(self.thresholds, dict):
            return {name: float(self.thresholds.get(name, self.default_threshold)) for name in labels}
        return {name: float(self.thresholds) for name in labels}


_V3 = dict(layout_model_type="pp_doclayout_v3", layout_name="pp-doclayout-v3",
           layout_hub_id="PaddlePaddle/PP-DocLayoutV3_safetensors", thresholds=0.3, nms="box", shape="auto")
VERSIONS = {v.name: v for v in (
    PipelineVersion("1.0", "pp_doclayout_v2", "pp-doclayout-v2", "PaddlePaddle/PP-DocLayoutV2_safetensors",
                    "PaddleOCR-VL.yaml", V1_THRESHOLDS, "box", "rect"),
    PipelineVersion("1.5", yaml="PaddleOCR-VL-1.5.yaml", **_V3),
    PipelineVersion("1.6", yaml="PaddleOCR-VL-1.6.yaml", **_V3),
    # 1.8: 1.6's numbers, quad-IoU NMS (transformers' PP-DocLayoutV4 notes name it among PaddleX's layout policies)
    # and the quadrilaterals as detected; none of it read from PaddleX 3.8 code
    PipelineVersion("1.8", "pp_doclayout_v4", "pp-doclayout-v4", "PaddlePaddle/PP-DocLayoutV4_safetensors",
                    "PaddleOCR-VL-1.8.yaml (not public)", 0.3, "quad", "as_detected", verified=False),
)}
# the version a layout checkpoint's model_type runs when none is asked for (1.5 and 1.6 share their rules)
BY_LAYOUT = {"pp_doclayout_v2": "1.0", "pp_doclayout_v3": "1.6", "pp_doclayout_v4": "1.8"}
DEFAULT = "1.0"  # without a layout checkpoint or a version: PP-DocLayoutV2, as before PaddleOCR 3.4


def select(forced, layout_model_type):
    """The PipelineVersion for a layout checkpoint's model_type, or the `forced` one when it runs that model; a
    forced version whose layout model is another is a UsageError (one line)."""
    if forced is None:
        if layout_model_type not in BY_LAYOUT:
            raise UsageError(f"the layout checkpoint's model_type {layout_model_type!r} is none of "
                             f"{', '.join(BY_LAYOUT)}")
        return VERSIONS[BY_LAYOUT[layout_model_type]]
    version = VERSIONS[forced]
    if version.layout_model_type != layout_model_type:
        raise UsageError(f"--pipeline-version {forced} runs {version.layout_model_type}, but the layout checkpoint "
                         f"is {layout_model_type}")
    return version


def layout_model_type(layout_dir):
    """config.json's model_type of a layout checkpoint folder (without loading it)."""
    from ms_ocr.config_utils import load_config_json
    return load_config_json(layout_dir).get("model_type")
