"""DeepSeek-OCR-2 through the processor and the CLI: inputs bit-identical to transformers' processor, greedy
tokens equal to transformers' generate, for the save_pretrained layout and a hand-written deepseek-ai config."""

import json
import shutil

import numpy as np
import pytest
from PIL import Image

from tests.cli_util import assert_one_line_error, run_module
from tests.helpers.tiny_deepseek import (ENCODER, IMAGE_TOKEN_ID, deepseek_ai_config, make_tiny_checkpoint,
                                         reference_greedy, reference_inputs, reference_processor, tiny_config)

NEW_TOKENS = 10
# (width, height): no tiles (small, tiny, odd, exactly one tile), 2..6 tile grids of different aspect ratios, a
# square just over the tile, a side just over the tile, very wide and very tall strips
SIZES = [(300, 200), (300, 140), (37, 23), (768, 768), (1000, 800), (2000, 500), (700, 1400), (780, 780),
         (769, 301), (1200, 1700), (64, 900), (2000, 150), (150, 2000)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_tiny_checkpoint(str(tmp_path_factory.mktemp("ds2")))


def _image(size, seed=0):
    w, h = size
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_processor_matches_reference(size, folder):
    from ms_ocr.models.deepseek_ocr2 import SPEC as D
    ours = D.resolve("processor").from_pretrained(folder, D.config_from_dir(folder))
    img = _image(size)
    got = ours([img], D.tasks["markdown"])
    want = reference_inputs(reference_processor(folder), [img], D.tasks["markdown"])
    np.testing.assert_array_equal(got["input_ids"], want["input_ids"][0].numpy())
    tiles, glob = got["views"][0]
    np.testing.assert_array_equal(glob, want["pixel_values"].numpy())
    n_local = int(want["num_local_patches"][0])
    assert (0 if tiles is None else len(tiles)) == n_local
    if n_local:
        np.testing.assert_array_equal(tiles, want["pixel_values_local"].numpy())


# DeepSeek's documented prompts place the image themselves ("<image>\nFree OCR."), and transformers' processor
# takes such text as given; a prompt without a placeholder gets "<image>\n" first
PROMPTS = ["Free OCR.", "<image>\nFree OCR.", "<image>Free OCR.", "Describe <image> in detail.",
           "<|grounding|><image>\nConvert the document to markdown."]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_prompt_ids_match_reference(prompt, folder):
    from ms_ocr.models.deepseek_ocr2 import SPEC as D
    ours = D.resolve("processor").from_pretrained(folder, D.config_from_dir(folder))
    img = _image((300, 140))
    got = ours([img], prompt)["input_ids"]
    text = prompt if "<image>" in prompt else "<image>\n" + prompt
    want = reference_processor(folder)(images=[img], text=text, return_tensors="pt")["input_ids"][0].numpy()
    np.testing.assert_array_equal(got, want)
    assert int((got == IMAGE_TOKEN_ID).sum()) == 257


@pytest.mark.parametrize("prompt,images", [("<image>\n<image>\nFree OCR.", 1), ("<image>\nFree OCR.", 2)])
def test_prompt_placeholders_must_match_images(prompt, images, folder):
    from ms_ocr.models.deepseek_ocr2 import SPEC as D
    ours = D.resolve("processor").from_pretrained(folder, D.config_from_dir(folder))
    with pytest.raises(ValueError, match=f"{prompt.count('<image>')} <image> placeholder\\(s\\) for {images} image"):
        ours([_image((64, 64))] * images, prompt)


def test_cli_prompt_with_extra_placeholder_is_one_line_error(folder, tmp_path):
    img_path = tmp_path / "x.png"
    _image((64, 64)).save(img_path)
    proc = run_module("ms_ocr.infer", "--model", "deepseek-ocr2", "--model-path", folder, "--image", str(img_path),
                      "--prompt", "<image>\n<image>\nFree OCR.")
    assert_one_line_error(proc, "2 <image> placeholder(s) for 1 image(s)")


def test_cli_greedy_tokens_equal_reference(folder, tmp_path):
    img_path = tmp_path / "page.png"
    _image((900, 1200), 3).save(img_path)
    want = reference_greedy(folder, [Image.open(img_path).convert("RGB")], "Free OCR.", NEW_TOKENS)
    proc = run_module("ms_ocr.infer", "--model", "deepseek-ocr2", "--model-path", folder, "--image", str(img_path),
                      "--task", "ocr", "--max-new-tokens", str(NEW_TOKENS), "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["token_ids"] == want


def test_deepseek_ai_layout_reads_the_same_model(folder, tmp_path):
    from ms_ocr.models.deepseek_ocr2 import SPEC
    ours = SPEC.config_from_dir(folder)
    alt = tmp_path / "deepseek-ai"
    shutil.copytree(folder, alt)
    (alt / "config.json").write_text(json.dumps(deepseek_ai_config()))
    # The remote-code config names only some sizes (the rest are fixed in its code: neck 256 channels, MLP
    # ratio 4, a Qwen2-0.5B encoder), so the tiny model is compared on what the file carries.
    cfg = SPEC.config_from_dir(str(alt))
    assert cfg.layout == "deepseek-ai"
    assert vars(cfg.text) == vars(ours.text)
    for key in ("dim", "depth", "heads", "global_layers", "downsample"):
        assert cfg.sam[key] == ours.sam[key], key
    assert cfg.sam["out_channels"] == 256 and cfg.sam["mlp_dim"] == 4 * cfg.sam["dim"]
    assert cfg.encoder.hidden_size == ENCODER["hidden_size"] and cfg.encoder.num_hidden_layers == 24
    assert cfg.image_token_id == ours.image_token_id


@pytest.mark.parametrize("where", ["text_config", "encoder_config", "language_config"])
def test_scaled_rope_is_refused(where):
    """Only plain rope is implemented: a scaled one fails by name instead of running as plain rope."""
    from ms_ocr.config_utils import CheckpointError
    from ms_ocr.models.deepseek_ocr2.config import DeepseekOCR2Config
    raw = deepseek_ai_config() if where == "language_config" else tiny_config().to_dict()
    part = raw["vision_config"]["encoder_config"] if where == "encoder_config" else raw[where]
    part["rope_parameters" if where != "language_config" else "rope_scaling"] = {
        "rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(CheckpointError, match="rope type 'linear'"):
        DeepseekOCR2Config.from_dict(raw)


@pytest.mark.parametrize("root,text", [(True, False), (False, True)], ids=["root-tied", "text-tied"])
def test_root_tie_word_embeddings_decides_the_head(root, text, tmp_path):
    """transformers ties lm_head to the embeddings by DeepseekOcr2Config.tie_word_embeddings (the root flag); the
    text config's flag is not read. The head we load equals the one transformers loads back."""
    import torch
    from transformers import DeepseekOcr2ForConditionalGeneration

    from ms_ocr.config_utils import load_config_json
    from ms_ocr.convert.loader import load_weights
    from ms_ocr.convert.safetensors_io import iter_checkpoint
    from ms_ocr.models.deepseek_ocr2 import SPEC as D
    from ms_ocr.models.deepseek_ocr2.config import DeepseekOCR2Config
    ref_cfg = tiny_config()
    ref_cfg.tie_word_embeddings, ref_cfg.text_config.tie_word_embeddings = root, text
    torch.manual_seed(0)
    DeepseekOcr2ForConditionalGeneration(ref_cfg).save_pretrained(tmp_path)
    want = DeepseekOcr2ForConditionalGeneration.from_pretrained(tmp_path).lm_head.weight.detach().numpy()
    cfg = DeepseekOCR2Config.from_dict(load_config_json(str(tmp_path)))
    assert cfg.text.tie_word_embeddings == root
    net = D.build(cfg)
    load_weights(net, iter_checkpoint(str(tmp_path)), D.name_table(cfg), source="tiny")  # strict
    head = net.model.embed_tokens.weight if net.tied else net.lm_head.weight
    np.testing.assert_array_equal(head.asnumpy(), want)


def test_wrong_checkpoint_for_model(folder, hunyuan_checkpoint, tmp_path):
    img_path = tmp_path / "x.png"
    _image((64, 64)).save(img_path)
    proc = run_module("ms_ocr.infer", "--model", "deepseek-ocr2", "--model-path", hunyuan_checkpoint(),
                      "--image", str(img_path))
    assert_one_line_error(proc, "hunyuan_vl", "deepseek-ocr2")


def test_converted_checkpoint_stacks_experts_and_gives_the_same_tokens(folder, tmp_path):
    from ms_ocr.convert.safetensors_io import iter_checkpoint
    img_path = tmp_path / "page.png"
    _image((500, 400), 4).save(img_path)
    out = tmp_path / "converted"
    proc = run_module("ms_ocr.convert", "--model", "deepseek-ocr2", "--src", folder, "--dst", str(out))
    assert proc.returncode == 0, proc.stderr
    names = {n: a.shape for n, a, _ in iter_checkpoint(str(out))}
    assert names["model.layers.1.mlp.experts.gate_proj"] == (8, 32, 64)  # [E, I, H] stacked
    assert not any(".experts.0." in n for n in names)
    runs = []
    for path in (folder, str(out)):
        proc = run_module("ms_ocr.infer", "--model", "deepseek-ocr2", "--model-path", path, "--image", str(img_path),
                          "--max-new-tokens", "6", "--json")
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1])["token_ids"])
    assert runs[0] == runs[1] and len(runs[0]) >= 1
