"""DeepSeek-OCR-2 on a tiny checkpoint that transformers itself saved (model, processor and tokenizer through
save_pretrained: tests/helpers/tiny_deepseek.make_saved_checkpoint), with DeepSeek's documented prompt
"<image>\\nFree OCR." and small and odd-sized images, against transformers' processor, model and generate:
input ids (BOS, image token count), pixels, image features, first logits, 24 greedy tokens through the CLI."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from tests.cli_util import run_module
from tests.helpers.parity import rel_err
from bench.references import saved_reference
from tests.helpers.tiny_deepseek import make_saved_checkpoint

PROMPT = "<image>\nFree OCR."
NEW_TOKENS = 24
# (width, height): smaller than a tile (the global view only: 257 image tokens), over a tile (the crop branch
# with a 2x1 grid), very wide and very tall (6 tiles in a row / column)
SIZES = [(300, 140), (900, 500), (2000, 150), (150, 2000)]
IMAGE_TOKENS = {(300, 140): 257, (900, 500): 257 + 2 * 144, (2000, 150): 257 + 6 * 144, (150, 2000): 257 + 6 * 144}


def _image(size):
    w, h = size
    return Image.fromarray(np.random.default_rng(w * 7 + h).integers(0, 256, (h, w, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = make_saved_checkpoint(str(tmp_path_factory.mktemp("ds2_saved")))
    model, processor = saved_reference(folder)
    return folder, model, processor


@pytest.fixture(scope="module")
def pipe(saved, graph_mode):
    from ms_ocr.models.deepseek_ocr2 import SPEC as deepseek_ocr2
    from ms_ocr.runtime import Buckets
    return deepseek_ocr2.load(saved[0], "CPU", "auto", Buckets(prefill=32, slots=64))


def _reference_inputs(processor, img):
    return processor(images=[img], text=PROMPT, return_tensors="pt")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_processor_inputs_equal_reference(size, saved):
    from ms_ocr.models.deepseek_ocr2 import SPEC as D
    folder, _, processor = saved
    img = _image(size)
    want = _reference_inputs(processor, img)
    got = D.resolve("processor").from_pretrained(folder, D.config_from_dir(folder))([img], PROMPT)
    ids = want["input_ids"][0].numpy()
    assert ids[0] == processor.tokenizer.bos_token_id
    assert int((ids == processor.image_token_id).sum()) == IMAGE_TOKENS[size]
    np.testing.assert_array_equal(got["input_ids"], ids)
    tiles, glob = got["views"][0]
    np.testing.assert_array_equal(glob, want["pixel_values"].numpy())
    if "pixel_values_local" in want:
        np.testing.assert_array_equal(tiles, want["pixel_values_local"].numpy())
    else:
        assert tiles is None


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_image_features_and_first_logits_equal_reference(size, saved, pipe):
    _, model, processor = saved
    img = _image(size)
    want = _reference_inputs(processor, img)
    with torch.no_grad():
        want_feats = model.get_image_features(want["pixel_values"], want.get("pixel_values_local"),
                                              want["num_local_patches"]).pooler_output[0].numpy()
        want_logits = model(**want).logits[0, -1].numpy()
    prep, _ = pipe.prepare([img], PROMPT)
    feats = pipe.encode_images(prep)
    assert rel_err(feats.asnumpy(), want_feats) < 1e-4
    logits = pipe.runtime.prefill(prep, feats, max_new_tokens=1).asnumpy()[0]
    assert rel_err(logits, want_logits) < 1e-4


@pytest.mark.parametrize("sizes", [SIZES[:1], pytest.param(SIZES[1:], marks=pytest.mark.slow)],
                         ids=["small", "tiled"])  # the tiled ones run in-process above (and the fixture's CLI test)
def test_cli_greedy_tokens_equal_reference(sizes, saved, tmp_path):
    folder, model, processor = saved
    paths, want = [], []
    for size in sizes:
        img = _image(size)
        paths.append(str(tmp_path / f"{size[0]}x{size[1]}.png"))
        img.save(paths[-1])
        inputs = _reference_inputs(processor, img)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
        want.append(out[0, inputs["input_ids"].shape[1]:].tolist())
    proc = run_module("ms_ocr.infer", "--model", "deepseek-ocr2", "--model-path", folder, "--image", *paths,
                      "--prompt", PROMPT, "--max-new-tokens", str(NEW_TOKENS), "--json")
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line)["token_ids"] for line in proc.stdout.strip().splitlines()]
    assert got == want
    assert all(len(t) == NEW_TOKENS for t in want)  # no early eos: every step is compared
