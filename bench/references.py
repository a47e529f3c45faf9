"""The transformers references the benchmarks and the parity tests compare ms_ocr with (fp32): each model's
`reference(folder, images, prompt) -> (model, processor inputs)` and the processors they build (the PIL image
processors named explicitly: the auto classes switch to torchvision when that is installed). torch and transformers
are imported inside the functions only."""

import json
import os

from bench.hunyuan_tokens import CHAT_TEMPLATE, IMAGE, IMAGE_END, IMAGE_START


def _read_json(folder, name):
    with open(os.path.join(folder, name), encoding="utf-8") as f:
        return json.load(f)


def chat_template(folder):
    """The folder's chat template, wherever it is."""
    if os.path.isfile(os.path.join(folder, "chat_template.jinja")):
        with open(os.path.join(folder, "chat_template.jinja"), encoding="utf-8") as f:
            return f.read()
    if os.path.isfile(os.path.join(folder, "chat_template.json")):
        return _read_json(folder, "chat_template.json")["chat_template"]
    return _read_json(folder, "tokenizer_config.json")["chat_template"]


# ---- PaddleOCR-VL -------------------------------------------------------------------------------------------------
def paddle_reference_processor(folder, cfg):
    """transformers' PaddleOCRVLProcessor with the explicit PIL image processor (the default class switches to
    torchvision when that is installed) and the checkpoint's tokenizer and chat template."""
    from transformers import AutoTokenizer, PaddleOCRVLImageProcessorPil
    from transformers import PaddleOCRVLProcessor as RefProcessor

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if "image_token" not in tokenizer.special_tokens_map:
        # the hub's original tokenizer_config has no image_token, which transformers 5's processor reads;
        # a plain attribute supplies it without making it a chat-template variable
        tokenizer.image_token, tokenizer.image_token_id = "<|IMAGE_PLACEHOLDER|>", cfg.image_token_id
    return RefProcessor(image_processor=PaddleOCRVLImageProcessorPil.from_pretrained(folder),
                        tokenizer=tokenizer, chat_template=tokenizer.chat_template)


def paddle_reference_inputs(ref, images, prompt):
    content = [{"type": "image", "image": img} for img in images] + [{"type": "text", "text": prompt}]
    return ref.apply_chat_template([{"role": "user", "content": content}], tokenize=True, return_dict=True,
                                   add_generation_prompt=True, return_tensors="pt")


def paddle_reference(folder, images, prompt):
    import torch
    from transformers import PaddleOCRVLForConditionalGeneration

    from ms_ocr.models.paddleocr_vl import SPEC
    model = PaddleOCRVLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).float().eval()
    processor = paddle_reference_processor(folder, SPEC.config_from_dir(folder))
    processor.chat_template = chat_template(folder)  # AutoTokenizer finds it in two of the three places only
    return model, paddle_reference_inputs(processor, images, prompt)


# ---- HunyuanOCR --------------------------------------------------------------------------------------------------
def hunyuan_reference_processor(folder):
    """transformers' HunYuanVLProcessor with the explicit PIL image processor and the folder's tokenizer."""
    from transformers import AutoTokenizer, HunYuanVLImageProcessorPil, HunYuanVLProcessor

    tokenizer = AutoTokenizer.from_pretrained(folder)
    for attr, token in (("image_token", IMAGE), ("image_start_token", IMAGE_START), ("image_end_token", IMAGE_END)):
        if getattr(tokenizer, attr, None) is None:  # the hub's original tokenizer_config names none of them
            setattr(tokenizer, attr, tokenizer.convert_ids_to_tokens(token))
            setattr(tokenizer, attr + "_id", token)
    return HunYuanVLProcessor(image_processor=HunYuanVLImageProcessorPil.from_pretrained(folder), tokenizer=tokenizer,
                              chat_template=CHAT_TEMPLATE)


def hunyuan_reference_inputs(ref, images, prompt, system=None):
    content = [{"type": "image", "image": img} for img in images] + [{"type": "text", "text": prompt}]
    messages = [{"role": "user", "content": content}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    return ref.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=True,
                                   return_tensors="pt")


def hunyuan_reference(folder, images, prompt):
    import torch
    from transformers import HunYuanVLForConditionalGeneration

    model = HunYuanVLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).float().eval()
    # ms_ocr prompts v1.0's flat-config checkpoint with an empty system turn, as Tencent's own client does, and
    # HunyuanOCR-1.5 (vision_config.max_vit_seq_len 65,536) with one and repetition_penalty 1.08, as Tencent's 1.5
    # transformers client runs generate (ms_ocr/models/hunyuan_vl/README.md); the reference gets the same
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    v1_5 = config["vision_config"].get("max_vit_seq_len") == 65536
    if v1_5:
        model.generation_config.repetition_penalty = 1.08
    system = "" if "text_config" not in config or v1_5 else None
    return model, hunyuan_reference_inputs(hunyuan_reference_processor(folder), images, prompt, system)


# ---- DeepSeek-OCR-2 ----------------------------------------------------------------------------------------------
def saved_reference(folder):
    """transformers' model and processor loaded back from the folder (the PIL image processor named explicitly:
    the auto class would switch to torchvision when that is installed)."""
    import torch
    from transformers import (AutoTokenizer, DeepseekOcr2ForConditionalGeneration, DeepseekOcr2ImageProcessorPil,
                              DeepseekOcr2Processor)
    model = DeepseekOcr2ForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    processor = DeepseekOcr2Processor(image_processor=DeepseekOcr2ImageProcessorPil.from_pretrained(folder),
                                      tokenizer=AutoTokenizer.from_pretrained(folder))
    return model, processor


def deepseek_ocr2_reference(folder, images, prompt):
    model, processor = saved_reference(folder)
    # ms_ocr puts "<image>\n" before a prompt that places no image itself (DeepSeek's documented prompt form)
    text = prompt if "<image>" in prompt else "<image>\n" * len(images) + prompt
    return model.float(), processor(images=images, text=text, return_tensors="pt")


# --model -> reference (DeepSeek-OCR v1 has no transformers class)
REFERENCES = {"paddleocr-vl": paddle_reference, "hunyuan-ocr": hunyuan_reference,
              "deepseek-ocr2": deepseek_ocr2_reference}


def reference_model_and_inputs(model_name, ckpt, img, prompt):
    """The transformers model (fp32) and its processor's inputs for one image (the benchmarks and
    scripts/dump_reference.py)."""
    reference = REFERENCES.get(model_name)
    if reference is None:
        raise SystemExit(f"no transformers reference for {model_name}")
    return reference(ckpt, [img], prompt)
