import pytest


@pytest.fixture(scope="session")
def layout_dir(tmp_path_factory):
    """Tiny PP-DocLayoutV2 checkpoint (hub labels, transformers save_pretrained), built once per session."""
    from tests.helpers.tiny_layout import make_tiny_layout_checkpoint
    return make_tiny_layout_checkpoint(str(tmp_path_factory.mktemp("tiny_layout")))


@pytest.fixture(scope="session")
def layout_detector(graph_mode, layout_dir):
    """One compiled LayoutDetector over the tiny checkpoint; tests that change its threshold put it back."""
    from ms_ocr.models.pp_doclayout_v2 import LayoutDetector
    return LayoutDetector(layout_dir)
