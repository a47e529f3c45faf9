"""One description per model of the checkpoint variants, images and prompts real use brings.

A variant is a base layout built by the model's tiny-checkpoint helper ("transformers": what save_pretrained
writes; "hub": the published repository's original files) plus layout keys applied by tests/matrix/layouts.py:
  head            tied / untied / own_head_flag_tied / copy_head_flag_tied
  weights         (dtype, shard size or None)
  rope            rope_scaling / rope_parameters
  template        jinja / json / tokenizer_config
  image_settings  preprocessor_config.json / processor_config.json
Each variant names the images (by size) and the prompt it runs (`slow`: only with -m slow), so that across a model's variants every axis
value, every processor branch (below the minimum, above the maximum, very wide, very tall, ordinary) and a
prompt with and without the model's special tokens each occur at least once, without the full product.
"""

from dataclasses import dataclass, field

import numpy as np

from bench.references import deepseek_ocr2_reference, hunyuan_reference, paddle_reference
from tests.matrix.layouts import read_json


@dataclass
class ModelMatrix:
    cli: str                    # --model
    package: str                # ms_ocr.models.<package>
    build: object               # build(folder, layout, **build_kwargs) -> folder
    reference: object           # reference(folder, image paths, prompt, n) -> (greedy ids per image, first logits)
    images: dict                # name -> (width, height)
    prompts: dict               # name -> prompt text
    variants: dict = field(default_factory=dict)  # id -> dict(layout, build kwargs, layout keys, images, prompt)
    load_kwargs: dict = field(default_factory=dict)  # package.load(...) extras (and --mode below)
    cli_args: tuple = ()
    # the full-size check (-m slow): real config with random weights (bench/real_size.py BUILDERS key),
    # a page (width, height) and a prompt; `reference_model(folder, images, prompt)` -> (model, inputs)
    full_size: dict = None
    reference_model: object = None
    # the per-component parity tests (tests/matrix/suite.py, vision tower and cached decode against the reference's
    # forward on a tiny checkpoint): checkpoint(request) -> folder, reference(folder) -> model, patches(grids, seed),
    # tower(runtime, image's VisionInputs) -> ours before the vision head, ref_vision(model, pixels, grids) ->
    # (tower, image features), prompt(cfg, grids) -> ids with image placeholders, decode_variants (prefill
    # attention block, host-written cache)
    components: dict = None
    # variants of the model's published layouts that a neighbouring model's checkpoint could be taken for (or that
    # could be taken for one): id -> dict(layout, config = a change of config.json (dict -> dict) or None, model =
    # the --model it is run with, refused = what the one-line refusal names); the right model's own run is a variant
    neighbours: dict = field(default_factory=dict)


def transformers_reference(load):
    """reference() over transformers' generate: load(folder, images, prompt) -> (model, inputs)."""
    def run(folder, paths, prompt, max_new_tokens):
        import torch
        from PIL import Image

        tokens, first = [], None
        for path in paths:
            model, inputs = load(folder, [Image.open(path).convert("RGB")], prompt)
            with torch.no_grad():
                out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, output_logits=True,
                                     return_dict_in_generate=True)
            tokens.append(out.sequences[0, inputs["input_ids"].shape[1]:].tolist())
            first = out.logits[0][0].float().numpy() if first is None else first
        return tokens, first
    return run


def _paddle_build(folder, layout, tokenizer="json"):
    from tests.helpers.tiny_paddle import make_tiny_checkpoint
    return make_tiny_checkpoint(folder, layout=layout, tokenizer_kind=tokenizer)


def _hunyuan_build(folder, layout):
    from tests.helpers.tiny_hunyuan import make_tiny_checkpoint
    return make_tiny_checkpoint(folder, layout=layout)


def paddle_prompt(cfg, grids, n_text=7, seed=0):
    """A PaddleOCR-VL prompt of random text ids around each image's placeholders (also the model's own parity
    tests, tests/models/paddleocr_vl)."""
    rng = np.random.default_rng(seed)
    ids = [1] + list(rng.integers(10, 200, n_text))
    for t, h, w in grids:
        ids += [cfg.vision_start_token_id] + [cfg.image_token_id] * (t * h * w // 4) + [cfg.vision_end_token_id]
        ids += list(rng.integers(10, 200, 3))
    return np.array(ids, np.int64)


def paddle_patches(grids, seed):
    """Random PaddleOCR-VL patches [N, 3, 14, 14] for (t, h, w) grids."""
    return _patches(grids, seed, (3, 14, 14))


def reference_forward(model, ids, pix, grids, image_token_id):
    """A transformers VLM's logits over `ids` with the images' pixels, its rope positions [A, S] and decode delta."""
    import torch
    tt = torch.tensor(ids)[None]
    mm = (tt == image_token_id).int()
    with torch.no_grad():
        logits = model(input_ids=tt, pixel_values=torch.tensor(pix), image_grid_thw=torch.tensor(grids),
                       mm_token_type_ids=mm).logits[0].numpy()
        pos, delta = model.model.get_rope_index(tt, mm_token_type_ids=mm, image_grid_thw=torch.tensor(grids))
    return logits, pos[:, 0].numpy(), int(delta[0, 0])


def _paddle_components():
    def tower(rt, item):  # the encoder output after post_layernorm, before the projector
        return rt.model.visual.vision_model.post_layernorm(rt.vision.tower(item)).asnumpy()

    def ref_vision(model, pix, grids):
        import torch
        tower = model.model.visual(pixel_values=torch.tensor(pix)[None], grid_thw=torch.tensor(grids))
        feats = model.model.get_image_features(torch.tensor(pix), torch.tensor(grids)).pooler_output
        return tower.last_hidden_state.numpy(), torch.cat(feats).numpy()

    # chunk 8: several causal query blocks over growing key prefixes; host cache off: the caches written in the
    # graph (DecodeStep, as on Ascend and in the exported text graph) instead of by the host
    return dict(checkpoint=lambda request: request.getfixturevalue("tiny_dir"), reference=_transformers_model,
                patches=paddle_patches, tower=tower, ref_vision=ref_vision, prompt=paddle_prompt, decode_variants=[(256, True), (8, True), (256, False)])


def _hunyuan_components():
    def ref_vision(model, pix, grids):
        import torch
        out = model.model.vision_tower(torch.tensor(pix), grid_thw=torch.tensor(grids))
        return out.last_hidden_state[0].numpy(), out.pooler_output[0].numpy()

    def prompt(cfg, grids, seed=0):
        rng = np.random.default_rng(seed)
        ids = [cfg.text.bos_token_id] + list(rng.integers(10, 300, 6))
        for _, h, w in grids:
            ids += [cfg.im_start_id] + [cfg.image_token_id] * (h // 2 * (w // 2 + 1) + 2) + [cfg.im_end_id]
            ids += list(rng.integers(10, 300, 3))
        return np.array(ids, np.int64)

    return dict(checkpoint=lambda request: request.getfixturevalue("hunyuan_checkpoint")(),
                reference=_transformers_model, patches=lambda grids, seed: _patches(grids, seed, (3 * 16 * 16,)),
                tower=lambda rt, item: rt.vision.tower(item).asnumpy(), ref_vision=ref_vision, prompt=prompt,
                decode_variants=[(256, True), (8, True)])


def _patches(grids, seed, shape):
    n = sum(t * h * w for t, h, w in grids)
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


def _transformers_model(folder):
    """The folder's transformers class (AutoModelForImageTextToText), fp32."""
    import torch
    from transformers import AutoModelForImageTextToText
    torch.manual_seed(0)
    return AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()


PADDLE = ModelMatrix(
    cli="paddleocr-vl", package="paddleocr_vl", build=_paddle_build, reference=transformers_reference(paddle_reference),
    reference_model=paddle_reference, full_size=dict(page=(336, 448), prompt="OCR:"),
    components=_paddle_components(),
    # tiny processor: 3,136..50,176 pixels (tests/helpers/tiny_paddle.py)
    images={"page": (96, 128), "small": (30, 22), "wide": (700, 36), "tall": (40, 520), "large": (900, 640)},
    prompts={"plain": "OCR:", "special": "Chart Recognition: <|LOC_0|> then <|LOC_1|>", "spotting": "Spotting:"},
    variants={
        "save_pretrained": dict(layout="transformers", images=["page", "wide"], prompt="plain"),
        # the published file: flat config, tie flag false, lm_head of its own (the flag is what transformers
        # reads as tied; it loads the stored head)
        "hub_own_head": dict(layout="hub", head="own_head_flag_tied", images=["page", "tall"], prompt="plain"),
        "hub_copy_head_bf16_sharded": dict(layout="hub", head="copy_head_flag_tied", weights=("bfloat16", "100KB"),
                                           images=["small", "large"], prompt="special"),
        "hub_sentencepiece_untied": dict(layout="hub", build=dict(tokenizer="sentencepiece"), head="untied",
                                         images=["wide", "small"], prompt="special"),
        "tied_rope_scaling_template_json": dict(layout="transformers", head="tied", rope="rope_scaling",
                                                template="json", images=["large", "tall"], prompt="plain"),
        "processor_config_template_in_tokenizer": dict(layout="transformers", image_settings="processor_config.json",
                                                       template="tokenizer_config", rope="rope_parameters",
                                                       images=["page"], prompt="special"),
        # PaddleOCR-VL-1.5's published differences: "Assistant:\n" in its chat template, an auto_map in its
        # preprocessor_config.json (layouts.set_version); its weights' layout is 1.0's
        "hub_v1_5": dict(layout="hub", head="own_head_flag_tied", version="1.5", images=["wide", "page"],
                         prompt="spotting"),
    })

HUNYUAN = ModelMatrix(
    cli="hunyuan-ocr", package="hunyuan_vl", build=_hunyuan_build, reference=transformers_reference(hunyuan_reference),
    reference_model=hunyuan_reference, components=_hunyuan_components(),
    # its spotting prompt
    full_size=dict(page=(384, 512), prompt="检测并识别图片中的文字，将文本坐标格式化输出。"),
    # tiny processor: 4,096..49,152 pixels, patch 16 (tests/helpers/tiny_hunyuan.py)
    images={"page": (96, 128), "small": (24, 30), "wide": (720, 40), "tall": (36, 600), "large": (1000, 700)},
    prompts={"plain": "Extract the text in the image.",
             "special": "Spot the text <｜hy_place▁holder▁no▁110｜>and its box."},
    variants={
        "save_pretrained": dict(layout="transformers", head="tied", images=["page", "tall"], prompt="plain"),
        "hub_flat_bf16_sharded": dict(layout="hub", weights=("bfloat16", "60KB"), images=["wide", "small"],
                                      prompt="plain"),
        "hub_own_head": dict(layout="hub", head="own_head_flag_tied", images=["large", "page"], prompt="special"),
        "untied_rope_scaling_template_json": dict(layout="transformers", head="untied", rope="rope_scaling",
                                                  template="json", images=["small", "tall"], prompt="special"),
        "processor_config_template_in_tokenizer": dict(layout="transformers", image_settings="processor_config.json",
                                                       template="tokenizer_config", images=["wide"], prompt="plain"),
        "hub_rope_parameters_template_jinja": dict(layout="hub", rope="rope_parameters", template="jinja",
                                                   images=["large"], prompt="special"),
        # HunyuanOCR-1.5 at the hub root: nested text_config (rope_scaling) with the text fields duplicated at the
        # root, max_vit_seq_len 65,536, chat_template.jinja (layouts.set_version); run with 1.5's system turn and
        # repetition_penalty 1.08 on both sides
        "v1_5_root": dict(layout="transformers", version="hunyuan-1.5", rope="rope_scaling", template="jinja",
                          images=["page", "wide"], prompt="plain"),
    })

def _ds2_build(folder, layout):
    from tests.helpers.tiny_deepseek import make_saved_checkpoint
    return make_saved_checkpoint(folder)


DEEPSEEK_V2 = ModelMatrix(
    cli="deepseek-ocr2", package="deepseek_ocr2", build=_ds2_build,
    reference=transformers_reference(deepseek_ocr2_reference),
    reference_model=deepseek_ocr2_reference,
    # a page under one 768-px tile: the 1024-px global view only (SAM at full size); "auto" keeps the 3B model's
    # bf16 weights bf16 (computing what fp32 copies would, docs/precision.md) so that it fits beside nothing
    full_size=dict(page=(600, 450), prompt="Free OCR.", dtype="auto"),
    # global view only below a 768-px tile (300x140: 257 image tokens), tiles beyond, 6 in a row / column
    images={"small": (300, 140), "wide": (2000, 150), "tall": (150, 2000), "large": (1000, 700)},
    prompts={"plain": "Free OCR.", "special": "<image>\nFree OCR."},
    variants={
        # transformers' save: nested text_config, processor_config.json, its own head (flags false). Slow: the
        # default run has this layout at this size through the CLI and in process already
        # (tests/models/deepseek/test_ocr2_saved_checkpoint.py, `small` and 300x140)
        "save_pretrained": dict(layout="transformers", images=["small"], prompt="special", slow=True),
        "tied_bf16_sharded": dict(layout="transformers", head="tied", weights=("bfloat16", "200KB"),
                                  images=["small"], prompt="plain"),
        "own_head_flag_tied_preprocessor_config": dict(layout="transformers", head="own_head_flag_tied",
                                                       image_settings="preprocessor_config.json",
                                                       images=["small"], prompt="special"),
        # the tile branch (7 views of SAM at 1024 px: ~30 s an image here); tests/models/deepseek runs these
        # sizes on the save_pretrained layout in the default run
        "tiles": dict(layout="transformers", images=["large", "wide", "tall"], prompt="plain", slow=True),
    })


def _v1_build(folder, layout):
    from tests.helpers.golden_v1 import make_v1_checkpoint
    make_v1_checkpoint(folder)
    return folder


def _v1_reference(folder, paths, prompt, max_new_tokens):
    """DeepSeek-OCR v1 has no transformers class: the official code's assembled image features of the golden
    view (tests/data/deepseek_ocr_v1, picked by the image's size) fed to transformers' MoE decoder with the
    folder's own weights and head (the embeddings when the head is tied)."""
    import torch
    from safetensors.torch import load_file

    from ms_ocr.convert.safetensors_io import weight_files
    from ms_ocr.models.deepseek_ocr import SPEC
    from tests.helpers.golden_v1 import golden, v1_greedy, v1_text_model
    from PIL import Image

    state = {}
    for path in weight_files(folder):
        state.update(load_file(path))
    text, _ = v1_text_model()  # the decoder the folder was built from (layouts change files and the head only)
    assert torch.equal(state["model.embed_tokens.weight"].float(), text.embed_tokens.weight)
    head = state["model.embed_tokens.weight"] if SPEC.config_from_dir(folder).text.tie_word_embeddings \
        else state["lm_head.weight"]
    head = head.float()
    tokens, first = [], None
    for path in paths:
        case = {128: "tiny", 256: "base", 320: "large"}[Image.open(path).width]
        out, logits = v1_greedy(text, head, folder, golden()[f"asm.{case}_noTiles"], prompt, max_new_tokens)
        first = logits[0] if first is None else first
        tokens.append(out)
    return tokens, first


def _v1_images():
    """The golden views as image files (the mode's global view at native size: no resize, no padding)."""
    return {"tiny": "golden:tiny_global", "base": "golden:base_global", "large": "golden:large_global"}


DEEPSEEK_V1 = ModelMatrix(
    cli="deepseek-ocr", package="deepseek_ocr", build=_v1_build, reference=_v1_reference,
    images=_v1_images(), prompts={"plain": "Free OCR.", "special": "<|grounding|>Convert the document to markdown."},
    cli_args=("--no-repeat-ngram", "0"),
    variants={
        # the released layout: language_config, per-expert tensors, its own lm_head (flag false). Slow: the default
        # run has this checkpoint, mode and prompt through the CLI (tests/models/deepseek/test_v1_end_to_end.py)
        "hub": dict(layout="hub", mode="base", images=["base"], prompt="plain", slow=True),
        "tied_sharded": dict(layout="hub", head="tied", weights=("float32", "40KB"), mode="large", images=["large"],
                             prompt="special"),
        "own_head_flag_tied": dict(layout="hub", head="own_head_flag_tied", mode="tiny", images=["tiny"],
                                   prompt="plain"),
    })

def _unnamed(config):
    """A DeepEncoder-v1 config with nothing naming its model (DeepSeek-OCR's model_type, no architectures, no
    auto_map), its sliding window kept: it could be either model."""
    out = {k: v for k, v in config.items() if k not in ("architectures", "auto_map")}
    return dict(out, model_type="deepseek_vl_v2")


def _with_window(config):
    """DeepSeek-OCR v1's hub config with Unlimited-OCR's top-level window added."""
    return dict(config, sliding_window=128)


def _deepseek_ai(config):
    """DeepSeek-OCR-2's remote-code config (deepseek-ai/DeepSeek-OCR-2: deepseek_vl_v2, qwen2 query encoder)."""
    from tests.helpers.tiny_deepseek import deepseek_ai_config
    return deepseek_ai_config()


BOTH = ("cannot tell deepseek-ocr from unlimited-ocr",)


def _neighbour(layout, model, *refused, config=None):
    """A neighbour variant: the base `layout`, config.json changed by `config`, run as `model`, refused naming
    `refused`."""
    return dict(layout=layout, config=config, model=model, refused=refused)


NEITHER = "neither deepseek-ocr nor unlimited-ocr"
DEEPSEEK_V1.neighbours.update({
    "hub_as_unlimited_ocr": _neighbour("hub", "unlimited-ocr", "--model deepseek-ocr"),
    "hub_as_deepseek_ocr2": _neighbour("hub", "deepseek-ocr2", "--model deepseek-ocr"),
    "hub_with_a_window": _neighbour("hub", "deepseek-ocr", *BOTH, config=_with_window),
})
DEEPSEEK_V2.neighbours.update({
    "as_deepseek_ocr": _neighbour("transformers", "deepseek-ocr", "not a deepseek-ocr checkpoint"),
    "as_unlimited_ocr": _neighbour("transformers", "unlimited-ocr", NEITHER),
    "deepseek_ai_as_deepseek_ocr": _neighbour("transformers", "deepseek-ocr", "not a DeepSeek-OCR checkpoint",
                                              config=_deepseek_ai),
    "deepseek_ai_as_unlimited_ocr": _neighbour("transformers", "unlimited-ocr", NEITHER, config=_deepseek_ai),
})


def _unlimited_build(folder, layout):
    from bench.tiny_unlimited import make_checkpoint
    return make_checkpoint(folder, layout)


def _unlimited_load(folder, images, prompt):
    """transformers' model on the folder's weights (a hub-layout folder: read through a copy with the tiny
    transformers config, which transformers cannot derive from the hub's remote-code file) and our processor's
    pixel tensors as its inputs (its own image processor needs torchvision)."""
    import shutil
    import tempfile

    import torch
    from transformers import UnlimitedOcrForConditionalGeneration

    from ms_ocr import models
    from bench import tiny_unlimited as tu
    processor = models.get("unlimited-ocr").host_side(folder)["processor"]
    with tempfile.TemporaryDirectory() as tmp:
        if read_json(folder, "config.json").get("model_type") == "unlimited-ocr":
            shutil.copytree(folder, tmp, dirs_exist_ok=True)
            tu.tiny_model().config.save_pretrained(tmp)
            folder = tmp
        model = UnlimitedOcrForConditionalGeneration.from_pretrained(folder, dtype=torch.float32,
                                                                     attn_implementation="eager").eval()
    return model, tu.reference_inputs(processor(images, prompt))


UNLIMITED = ModelMatrix(
    cli="unlimited-ocr", package="unlimited_ocr", build=_unlimited_build,
    reference=transformers_reference(_unlimited_load),
    # tiny processor (SAM at 256 px): global view 256, tiles of 160 beyond 160 px (up to 32 of them)
    images={"small": (150, 120), "page": (420, 200), "tall": (140, 900)},
    prompts={"plain": "document parsing.", "special": "<image>Multi page parsing."},
    cli_args=("--no-repeat-ngram", "0"),
    variants={
        # transformers' save_pretrained (text_config.sliding_window 8) and the hub's remote-code config (its
        # top-level sliding_window 8) over the same weights
        "save_pretrained": dict(layout="transformers", images=["small", "page"], prompt="plain"),
        "hub": dict(layout="hub", images=["page"], prompt="special"),
        "hub_bf16_sharded": dict(layout="hub", weights=("bfloat16", "200KB"), images=["tall"], prompt="plain"),
    },
    neighbours={
        "hub_as_deepseek_ocr": _neighbour("hub", "deepseek-ocr", "--model unlimited-ocr"),
        "hub_as_deepseek_ocr2": _neighbour("hub", "deepseek-ocr2", "--model unlimited-ocr"),
        "save_pretrained_as_deepseek_ocr": _neighbour("transformers", "deepseek-ocr", "--model unlimited-ocr"),
        "hub_unnamed": _neighbour("hub", "unlimited-ocr", *BOTH, config=_unnamed),
        "hub_unnamed_as_deepseek_ocr": _neighbour("hub", "deepseek-ocr", *BOTH, config=_unnamed),
    })

MATRICES = {m.cli: m for m in (PADDLE, HUNYUAN, DEEPSEEK_V2, DEEPSEEK_V1, UNLIMITED)}
