"""Which pipeline version runs: from the layout checkpoint's model_type (PP-DocLayoutV2 -> 1.0, V3 -> 1.6, V4 -> 1.8)
or --pipeline-version, a forced version of another layout model refused in one line; the thresholds the detector
gets (the version's, or --layout-threshold for every label); the command line end to end with a stand-in
PP-DocLayoutV4 detector: the page JSON's "layout" (the detector's blocks as they are, with points), "warp", "blocks"
with their outlines, and the drawing's quadrilaterals."""

import json

import numpy as np
import pytest
from PIL import Image

from ms_ocr.errors import UsageError
from ms_ocr.layout import LayoutBlock, PageLayout
from ms_ocr.pipeline import versions as V
from ms_ocr.pipeline.document import DocumentPipeline, locate_layout
from tests.helpers.tiny_layout import LABELS


def _layout_folder(tmp_path, model_type):
    folder = tmp_path / model_type
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    return str(folder)


def test_the_layout_checkpoint_picks_the_version(tmp_path):
    picked = {t: locate_layout(_layout_folder(tmp_path, t))[1].name
              for t in ("pp_doclayout_v2", "pp_doclayout_v3", "pp_doclayout_v4")}
    assert picked == {"pp_doclayout_v2": "1.0", "pp_doclayout_v3": "1.6", "pp_doclayout_v4": "1.8"}
    v3 = _layout_folder(tmp_path, "pp_doclayout_v3")
    assert locate_layout(v3, "1.5")[1].name == "1.5" and locate_layout(v3, "1.6")[1].name == "1.6"
    with pytest.raises(UsageError, match=r"^--pipeline-version 1.0 runs pp_doclayout_v2, but the layout checkpoint "
                                         r"is pp_doclayout_v3$"):
        locate_layout(v3, "1.0")
    with pytest.raises(UsageError, match="model_type 'paddleocr_vl' is none of"):
        locate_layout(_layout_folder(tmp_path, "paddleocr_vl"))


def test_versions_differ_only_where_paddlex_yamls_do():
    one, v15, v16, v18 = (V.VERSIONS[n] for n in ("1.0", "1.5", "1.6", "1.8"))
    same = {f.name for f in V.PipelineVersion.__dataclass_fields__.values()} - {"name", "yaml"}
    assert {k: getattr(v15, k) for k in same} == {k: getattr(v16, k) for k in same}
    assert (one.thresholds, v16.thresholds, v18.thresholds) == (V.V1_THRESHOLDS, 0.3, 0.3)
    assert (one.shape, v16.shape, v18.shape) == ("rect", "auto", "as_detected")
    assert (one.nms, v16.nms, v18.nms) == ("box", "box", "quad")
    assert one.region_pixels == v16.region_pixels == (112896, 1003520) and all(v.merge_blocks for v in (one, v16))
    assert [v.verified for v in (one, v15, v16, v18)] == [True, True, True, False]


class StubDetector:
    """Stands in for a LayoutDetector: the labels of the hub checkpoints, fixed blocks, the threshold it was
    given."""

    def __init__(self, model_type, blocks=(), warp=None):
        self.spec = type("Spec", (), {"model_type": model_type})
        self.labels, self.blocks, self.warp, self.asked = list(LABELS), list(blocks), warp, []

    def threshold_array(self, table):
        return np.asarray([table[n] for n in self.labels], np.float32)

    def analyze(self, page, threshold=None):
        self.asked.append(threshold)
        return PageLayout(list(self.blocks), self.warp, ())

    def pop_compile_seconds(self):
        return 0.0


def test_thresholds_the_detector_gets():
    v2 = DocumentPipeline(StubDetector("pp_doclayout_v2"), None, None, None)
    assert v2.version.name == "1.0" and v2.thresholds["seal"] == 0.45 and v2.thresholds["table"] == 0.5
    np.testing.assert_array_equal(v2.layout_threshold, np.float32([V.V1_THRESHOLDS.get(n, 0.5) for n in LABELS]))
    v3 = DocumentPipeline(StubDetector("pp_doclayout_v3"), None, None, None)
    assert v3.version.name == "1.6" and v3.layout_threshold == 0.3
    forced = DocumentPipeline(StubDetector("pp_doclayout_v2"), None, None, None, layout_threshold=0.25)
    assert forced.layout_threshold == 0.25 and set(forced.thresholds.values()) == {0.25}
    with pytest.raises(UsageError, match="--pipeline-version 1.8 runs pp_doclayout_v4"):
        DocumentPipeline(StubDetector("pp_doclayout_v3"), None, None, None, version="1.8")


W, H = 400, 300
QUAD = ((60.0, 50.0), (300.0, 70.0), (290.0, 150.0), (50.0, 130.0))  # a skewed text block
V4_BLOCKS = [LayoutBlock("text", 22, 0.81234567, (50.0, 50.0, 300.0, 150.0), 0, QUAD),
             LayoutBlock("image", 14, 0.7, (40.0, 170.0, 380.0, 290.0), 1,
                         ((40.0, 170.0), (380.0, 170.0), (380.0, 290.0), (40.0, 290.0))),
             LayoutBlock("text", 22, 0.2, (10.0, 10.0, 30.0, 30.0), 2, ((10.0, 10.0), (30.0, 10.0), (30.0, 30.0),
                                                                        (10.0, 30.0)))]  # below 0.35: filtered
WARP = {"roll": 2.5, "quadrant_confidence": 0.97, "shear": -1.25, "kx": 0.125, "ky": -0.0625}


def _cli(*args):
    from ms_ocr.pipeline.cli import main
    return main([str(a) for a in args])


def test_cli_with_a_pp_doclayoutv4_checkpoint(tiny_dir, vlm15, tmp_path, monkeypatch, capsys):
    from ms_ocr import layout as layout_package
    from ms_ocr.models.paddleocr_vl import SPEC
    v4 = _layout_folder(tmp_path, "pp_doclayout_v4")
    stub = StubDetector("pp_doclayout_v4", V4_BLOCKS, WARP)
    monkeypatch.setattr(layout_package, "LayoutDetector", lambda path, mode: stub)
    monkeypatch.setattr(type(SPEC), "load", lambda spec, *a, **k: vlm15)
    page = tmp_path / "page.png"
    Image.new("RGB", (W, H), "white").save(page)
    out = tmp_path / "out"
    common = ("--image", page, "--out", out, "--model-path", tiny_dir, "--layout-model-path", v4, "--max-new-tokens", 3)
    assert _cli(*common, "--pipeline-version", "1.0") == 2  # another layout model: refused before anything loads
    assert capsys.readouterr().err.strip() == ("error: --pipeline-version 1.0 runs pp_doclayout_v2, but the layout "
                                               "checkpoint is pp_doclayout_v4")
    assert _cli(*common, "--layout-threshold", "1.5") == 2
    assert "--layout-threshold must be in 0..1, not 1.5" in capsys.readouterr().err
    assert _cli(*common, "--layout-threshold", "0.35") == 0
    assert stub.asked == [0.35]
    record = json.loads((out / "page.json").read_text())
    assert record["pipeline_version"] == "1.8" and record["warp"] == WARP
    assert record["layout"] == [b.as_dict() for b in V4_BLOCKS]  # the detector's output as it is
    assert record["layout"][0] == {"label": "text", "label_id": 22, "score": 0.81235, "box": [50.0, 50.0, 300.0, 150.0],
                                   "order": 0, "points": [[60.0, 50.0], [300.0, 70.0], [290.0, 150.0], [50.0, 130.0]]}
    blocks = record["blocks"]
    assert [(b["label"], b["box"], b["order"]) for b in blocks] == [("text", [50, 50, 300, 150], 1),
                                                                    ("image", [40, 170, 380, 290], None)]
    assert blocks[0]["points"] == [list(p) for p in QUAD] and blocks[1]["image"].endswith("_40_170_380_290.jpg")
    identity = json.loads((out / "job.json").read_text())["identity"]
    assert (identity["pipeline_version"], identity["layout_threshold"]) == ("1.8", 0.35)
    drawing = np.asarray(Image.open(out / "page_layout.png").convert("RGB")).astype(int)
    assert (drawing[55, 280] == 255).all()  # inside the box, outside the quadrilateral: untouched
    assert (drawing[100, 170] != 255).any()  # inside the quadrilateral: tinted


def test_region_pixel_bounds_for_a_paddleocr_vl_recognizer(vlm15):
    """PaddleX 3.7.2 asks 112,896..1,003,520 pixels of every region image (its tiny checkpoint's own bounds are
    3,136..50,176): a 200 x 100 crop becomes 476 x 252 pixels, 153 image tokens (17 x 9 merged patches), not
    196 x 112 and 28."""
    from ms_ocr.models.paddleocr_vl import SPEC
    from ms_ocr.models.paddleocr_vl.processor import smart_resize
    region = Image.new("RGB", (200, 100), "white")
    image_tokens = lambda prep: int((prep.input_ids == vlm15.image_token_id).sum())  # noqa: E731
    paddlex = DocumentPipeline(None, vlm15, SPEC, None)
    own = DocumentPipeline(None, vlm15, SPEC, None, region_pixels=None)
    assert smart_resize(100, 200, 28, 112896, 1003520) == (252, 476)
    assert image_tokens(paddlex._prepare(region, "OCR:", "ocr")[0]) == (252 // 28) * (476 // 28) == 153
    assert smart_resize(100, 200, 28, 3136, 50176) == (112, 196)
    assert image_tokens(own._prepare(region, "OCR:", "ocr")[0]) == 4 * 7
    text = vlm15.processor.tokenizer.decode(paddlex._prepare(region, "OCR:", "ocr")[0].input_ids.tolist())
    assert text.endswith("OCR:\nAssistant:\n"), text[-40:]  # the checkpoint's own (1.5) template
