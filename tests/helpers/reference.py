"""The transformers reference pieces the tests compare against (test-only: imports torch/transformers)."""


def reference_processor(folder, cfg):
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


def reference_inputs(ref, images, prompt):
    content = [{"type": "image", "image": img} for img in images] + [{"type": "text", "text": prompt}]
    return ref.apply_chat_template([{"role": "user", "content": content}], tokenize=True, return_dict=True,
                                   add_generation_prompt=True, return_tensors="pt")


def reference_greedy(folder, cfg, images, prompt, max_new_tokens, weights_dtype=None):
    """Greedy token ids from transformers' generate (fp32 compute; weights optionally rounded to bf16)."""
    import torch
    from transformers import PaddleOCRVLForConditionalGeneration

    model = PaddleOCRVLForConditionalGeneration.from_pretrained(folder, dtype=weights_dtype or torch.float32)
    model = model.float().eval()
    inputs = reference_inputs(reference_processor(folder, cfg), images, prompt)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:].tolist()
