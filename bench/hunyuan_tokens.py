"""The tiny HunyuanOCR tokenizer's special tokens and ids and HunyuanOCR's chat template: the tiny and real-size test
checkpoints write them (write_tokenizer_json, tokenizer_config), the transformers reference's processor
(bench/references.py) reads them."""

from bench.tiny_bpe import write_bpe_tokenizer

# Special tokens (content, id offset after the BPE vocabulary): the subset of HunyuanOCR's 818 added tokens
# the template, the processor and the spotting markup use.
BPE_VOCAB = 360
SPECIALS = ["<｜hy_begin▁of▁sentence｜>", "<｜hy_end▁of▁sentence｜>", "<｜hy_▁pad▁｜>", "<｜hy_User｜>",
            "<｜hy_Assistant｜>", "<｜hy_place▁holder▁no▁2｜>", "<｜hy_place▁holder▁no▁3｜>",
            "<｜hy_place▁holder▁no▁100｜>", "<｜hy_place▁holder▁no▁101｜>", "<｜hy_place▁holder▁no▁102｜>",
            "<｜hy_place▁holder▁no▁103｜>", "<｜hy_place▁holder▁no▁110｜>", "<｜hy_place▁holder▁no▁111｜>",
            "<｜hy_place▁holder▁no▁112｜>", "<｜hy_place▁holder▁no▁113｜>"]
VOCAB_SIZE = 400
IDS = {tok: BPE_VOCAB + i for i, tok in enumerate(SPECIALS)}
BOS, PAD = IDS["<｜hy_begin▁of▁sentence｜>"], IDS["<｜hy_▁pad▁｜>"]
EOS, EOD = IDS["<｜hy_Assistant｜>"], IDS["<｜hy_place▁holder▁no▁2｜>"]
IMAGE_START, IMAGE_END = IDS["<｜hy_place▁holder▁no▁100｜>"], IDS["<｜hy_place▁holder▁no▁101｜>"]
IMAGE, NEWLINE = IDS["<｜hy_place▁holder▁no▁102｜>"], IDS["<｜hy_place▁holder▁no▁103｜>"]
# the image token ids at the root of a HunYuanVLConfig
ROOT_IDS = dict(image_token_id=IMAGE, im_start_id=IMAGE_START, im_end_id=IMAGE_END, im_newline_id=NEWLINE)

CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% if messages[0]['content'] "
    "is string %}{% set system_message = messages[0]['content'] %}{% else %}{% set system_message = "
    "messages[0]['content']['text'] %}{% endif %}<｜hy_begin▁of▁sentence｜>{{ system_message }}"
    "<｜hy_place▁holder▁no▁3｜>{% else %}{% set loop_messages = messages %}<｜hy_begin▁of▁sentence｜>{% endif %}"
    "{% for message in loop_messages %}{% if message['role'] == 'user' %}{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' "
    "or 'image' in content or 'image_url' in content %}<｜hy_place▁holder▁no▁100｜><｜hy_place▁holder▁no▁102｜>"
    "<｜hy_place▁holder▁no▁101｜>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}"
    "{% endif %}<｜hy_User｜>{% elif message['role'] == 'assistant' %}{{ message['content'] }}<｜hy_Assistant｜>"
    "{% endif %}{% endfor %}")


def write_tokenizer_json(path, seed):
    """A byte-level BPE tokenizer.json (as HunyuanOCR's) with SPECIALS as added special tokens at BPE_VOCAB.."""
    write_bpe_tokenizer(path, BPE_VOCAB, SPECIALS, seed)


def tokenizer_config(layout):
    """tokenizer_config.json's dict: "transformers" names the image tokens, "hub" (v1.0's) carries the template."""
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for t, i in IDS.items()}
    config = {"added_tokens_decoder": decoder, "bos_token": "<｜hy_begin▁of▁sentence｜>",
              "eos_token": "<｜hy_Assistant｜>", "pad_token": "<｜hy_▁pad▁｜>", "clean_up_tokenization_spaces": False,
              "model_max_length": 32768, "tokenizer_class": "PreTrainedTokenizerFast"}
    if layout == "transformers":
        config.update(tokenizer_class="TokenizersBackend", image_token="<｜hy_place▁holder▁no▁102｜>",
                      image_start_token="<｜hy_place▁holder▁no▁100｜>", image_end_token="<｜hy_place▁holder▁no▁101｜>")
    else:
        config["chat_template"] = CHAT_TEMPLATE
    return config
