import pytest


@pytest.fixture(scope="session")
def layout_dir(tmp_path_factory):
    """Tiny PP-DocLayoutV2 checkpoint (hub labels, transformers save_pretrained), built once per session."""
    from tests.helpers.tiny_layout import make_tiny_layout_checkpoint
    return make_tiny_layout_checkpoint(str(tmp_path_factory.mktemp("tiny_layout")))


@pytest.fixture(scope="session")
def layout_detector(graph_mode, layout_dir):
    """One compiled LayoutDetector over the tiny checkpoint; tests that change its threshold put it back."""
    from ms_ocr.layout import LayoutDetector
    return LayoutDetector(layout_dir)


@pytest.fixture(scope="session")
def vlm15(graph_mode, tiny_dir, tmp_path_factory):
    """The tiny PaddleOCR-VL recogniser with PaddleOCR-VL-1.5's published file differences (its chat template ends
    the prompt "Assistant:\\n"; tests/matrix/layouts.set_version), loaded once."""
    import shutil
    from ms_ocr.models.paddleocr_vl import SPEC
    from ms_ocr.runtime import Buckets
    from tests.matrix.layouts import set_version
    folder = str(tmp_path_factory.mktemp("tiny_vl15") / "ckpt")
    shutil.copytree(tiny_dir, folder)
    set_version(folder, "1.5")
    return SPEC.load(folder, "CPU", "auto", Buckets(prefill=32, slots=64))
