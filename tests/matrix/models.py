"""One description per model of the checkpoint variants, images and prompts real use brings.

A variant is a base layout built by the model's tiny-checkpoint helper ("transformers": what save_pretrained
writes; "hub": the published repository's original files) plus layout keys applied by tests/matrix/layouts.py:
  head            tied / untied / own_head_flag_tied / copy_head_flag_tied
  weights         (dtype, shard size or None)
  rope            rope_scaling / rope_parameters
  template        jinja / json / tokenizer_config
  image_settings  preprocessor_config.json / processor_config.json
Each variant names the images (by size) and the prompt it runs, so that across a model's variants every axis
value, every processor branch (below the minimum, above the maximum, very wide, very tall, ordinary) and a
prompt with and without the model's special tokens each occur at least once, without the full product.
"""

from dataclasses import dataclass, field

from tests.matrix.layouts import chat_template, read_json


@dataclass
class ModelMatrix:
    cli: str                    # --model
    package: str                # ms_ocr.models.<package>
    build: object               # build(folder, layout, **build_kwargs) -> folder
    reference: object           # reference(folder, images, prompt) -> (model, inputs): transformers' model + inputs
    images: dict                # name -> (width, height)
    prompts: dict               # name -> prompt text
    variants: dict = field(default_factory=dict)  # id -> dict(layout, build kwargs, layout keys, images, prompt)


def _paddle_build(folder, layout, tokenizer="json"):
    from tests.helpers.tiny_paddle import make_tiny_checkpoint
    return make_tiny_checkpoint(folder, layout=layout, tokenizer_kind=tokenizer)


def _paddle_reference(folder, images, prompt):
    import torch
    from transformers import PaddleOCRVLForConditionalGeneration

    from ms_ocr.models.paddleocr_vl import config_from_dir
    from tests.helpers.reference import reference_inputs, reference_processor
    model = PaddleOCRVLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).float().eval()
    processor = reference_processor(folder, config_from_dir(folder))
    processor.chat_template = chat_template(folder)  # AutoTokenizer finds it in two of the three places only
    return model, reference_inputs(processor, images, prompt)


def _hunyuan_build(folder, layout):
    from tests.helpers.tiny_hunyuan import make_tiny_checkpoint
    return make_tiny_checkpoint(folder, layout=layout)


def _hunyuan_reference(folder, images, prompt):
    import torch
    from transformers import HunYuanVLForConditionalGeneration

    from tests.helpers.tiny_hunyuan import reference_inputs, reference_processor
    model = HunYuanVLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).float().eval()
    # ms_ocr prompts v1.0's flat-config checkpoint with an empty system turn, as Tencent's own client does
    # (ms_ocr/models/hunyuan_vl/README.md); the reference gets the same messages
    system = "" if "text_config" not in read_json(folder, "config.json") else None
    return model, reference_inputs(reference_processor(folder), images, prompt, system)


PADDLE = ModelMatrix(
    cli="paddleocr-vl", package="paddleocr_vl", build=_paddle_build, reference=_paddle_reference,
    # tiny processor: 3,136..50,176 pixels (tests/helpers/tiny_paddle.py)
    images={"page": (96, 128), "small": (30, 22), "wide": (700, 36), "tall": (40, 520), "large": (900, 640)},
    prompts={"plain": "OCR:", "special": "Chart Recognition: <|LOC_0|> then <|LOC_1|>"},
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
    })

HUNYUAN = ModelMatrix(
    cli="hunyuan-ocr", package="hunyuan_vl", build=_hunyuan_build, reference=_hunyuan_reference,
    # tiny processor: 4,096..49,152 pixels, patch 16 (tests/helpers/tiny_hunyuan.py)
    images={"page": (96, 128), "small": (24, 30), "wide": (720, 40), "tall": (36, 600), "large": (1000, 700)},
    prompts={"plain": "Extract the text in the image.",
             "special": "Spot the text <｜hy_place▁holder▁no▁110｜>and its box."},
    variants={
        "save_pretrained": dict(layout="transformers", images=["page", "tall"], prompt="plain"),
        "hub_flat_bf16_sharded": dict(layout="hub", weights=("bfloat16", "60KB"), images=["wide", "small"],
                                      prompt="plain"),
        "hub_own_head": dict(layout="hub", head="own_head_flag_tied", images=["large", "page"], prompt="special"),
        "untied_rope_scaling_template_json": dict(layout="transformers", head="untied", rope="rope_scaling",
                                                  template="json", images=["small", "tall"], prompt="special"),
        "processor_config_template_in_tokenizer": dict(layout="transformers", image_settings="processor_config.json",
                                                       template="tokenizer_config", images=["wide"], prompt="plain"),
        "hub_rope_parameters_template_jinja": dict(layout="hub", rope="rope_parameters", template="jinja",
                                                   images=["large"], prompt="special"),
    })

MATRICES = {m.cli: m for m in (PADDLE, HUNYUAN)}
