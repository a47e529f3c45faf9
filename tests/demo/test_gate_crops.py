"""Accuracy gate of the demo checkpoint on crops as users bring them (training/demo/data.py sample_crop at the
sizes users have them, held-out seeds), through the CLI: single lines 20-200 px high with paper on every side (CER
<= 3 % on the training fonts and <= 5 % in each height band, <= 10 % on the unseen fonts), screenshot lines
(<= 3 %), blocks of 2-4 lines (<= 5 %, the lines in the right order in >= 95 % of the blocks). The checkpoint reads
each text line of a crop scaled to its `text_line_height` (ms_ocr/processing/text_lines.py); transformers' generate
on the same line images gives the same tokens."""

import json
import random

import pytest

from ms_ocr.models import demo_checkpoint
from training.demo import data as demo_data
from tests.cli_util import run_module

SEED = 9500  # the training draws 0 (lines), 1000 (tokenizer), 7000-7003 (its evaluation); test_gate.py 9100-9101
COUNTS = {"lines": 90, "lines_unseen": 60, "screens": 40, "blocks": 40}
MAX_NEW_TOKENS = 64  # per line
BANDS = ((0, 40), (41, 100), (101, 10_000))  # crop heights in px

pytestmark = [pytest.mark.skipif(demo_checkpoint() is None, reason="ms_ocr/demo/paddleocr_vl holds no checkpoint"),
              pytest.mark.skipif(bool(demo_data.missing_fonts()), reason=f"fonts missing: {demo_data.missing_fonts()}; "
                                 f"apt-get install {demo_data.FONT_PACKAGES}")]


def _cer(preds, refs):
    from training.demo.model import cer
    return cer(preds, refs)


def _crops(name):
    kind, fonts = {"lines": ("line", demo_data.TRAIN_FONTS), "lines_unseen": ("line", demo_data.UNSEEN_FONTS),
                   "screens": ("screen", demo_data.TRAIN_FONTS), "blocks": ("block", demo_data.TRAIN_FONTS)}[name]
    rng = random.Random(SEED + list(COUNTS).index(name))
    return [demo_data.sample_crop(rng, fonts, kind=kind, max_area=None)[:2] for _ in range(COUNTS[name])]


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    """{set: [(image, truth, CLI record)]}: every crop through one `infer` run of the demo fallback."""
    tmp = tmp_path_factory.mktemp("crops")
    sets, paths = {name: _crops(name) for name in COUNTS}, []
    for name, items in sets.items():
        for i, (img, _) in enumerate(items):
            paths.append(str(tmp / f"{name}_{i:03d}.png"))
            img.save(paths[-1])
    proc = run_module("ms_ocr.infer", "--image", *paths, "--json", "--max-new-tokens", str(MAX_NEW_TOKENS),
                      env={"MS_OCR_HOME": str(tmp / "empty_cache"), "OMP_NUM_THREADS": "2"})
    assert proc.returncode == 0, proc.stderr
    records = iter(json.loads(line) for line in proc.stdout.splitlines())
    return {name: [(img, text, next(records)) for img, text in items] for name, items in sets.items()}


def _set_cer(items):
    return _cer([r["text"] for _, _, r in items], [text for _, text, _ in items])


def test_single_lines_of_every_height(gate):
    items = gate["lines"]
    value = _set_cer(items)
    bands = {band: _set_cer([it for it in items if band[0] <= it[0].height <= band[1]]) for band in BANDS}
    print(f"crops, single lines: {100 * value:.2f} % CER; by height " +
          ", ".join(f"{lo}-{hi} px {100 * c:.2f} %" for (lo, hi), c in bands.items()))
    assert all(sum(band[0] <= img.height <= band[1] for img, _, _ in items) >= 15 for band in BANDS)
    assert value <= 0.03 and all(c <= 0.05 for c in bands.values())


def test_single_lines_in_the_unseen_fonts(gate):
    value = _set_cer(gate["lines_unseen"])
    print(f"crops, single lines in {', '.join(demo_data.UNSEEN_FONTS)}: {100 * value:.2f} % CER")
    assert value <= 0.10


def test_screenshot_lines(gate):
    value = _set_cer(gate["screens"])
    print(f"crops, screenshot lines: {100 * value:.2f} % CER")
    assert value <= 0.03


def test_blocks_read_in_order(gate):
    """CER <= 5 %, and in >= 95 % of the blocks as many lines as drawn, each closest to the truth's line at its
    place."""
    from training.demo.model import edit_distance
    items = gate["blocks"]
    value = _set_cer(items)
    in_order = 0
    for _, text, record in items:
        want, got = text.split("\n"), record["text"].split("\n")
        in_order += len(got) == len(want) and all(
            min(range(len(want)), key=lambda j: edit_distance(line, want[j])) == i for i, line in enumerate(got))
    print(f"crops, blocks of 2-4 lines: {100 * value:.2f} % CER, lines in order in {in_order}/{len(items)}")
    assert value <= 0.05 and in_order >= 0.95 * len(items)


def test_tokens_match_transformers_generate_line_by_line(gate):
    """The CLI's tokens for a crop are transformers' greedy tokens for each of its line images in turn."""
    pytest.importorskip("transformers")
    from ms_ocr.config_utils import load_config_json
    from ms_ocr.models.paddleocr_vl.config import PaddleOCRVLConfig
    from ms_ocr.processing.settings import read_image_processor_dict
    from ms_ocr.processing.text_lines import line_images
    from tests.helpers.reference import reference_greedy

    folder = demo_checkpoint()
    cfg = PaddleOCRVLConfig.from_dict(load_config_json(folder))
    height = read_image_processor_dict(folder)["text_line_height"]
    items = gate["lines"][:6] + gate["screens"][:4] + gate["blocks"][:4]
    mismatched = []
    for img, _, record in items:
        want = [t for line in line_images(img, height) for t in reference_greedy(folder, cfg, [line], "OCR:",
                                                                                  MAX_NEW_TOKENS)]
        if record["token_ids"] != want:
            mismatched.append((record["image"], record["token_ids"], want))
    assert not mismatched, mismatched[:2]
