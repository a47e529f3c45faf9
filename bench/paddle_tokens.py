"""PaddleOCR-VL's chat template as the hub ships it (the tiny test tokenizers and the demo model's tokenizer write
it; tests/processing/test_chat.py renders it), and the tiny sentencepiece tokenizer's (bench/tiny_tokenizer.py)
vocabulary size and special token ids, which the tiny and real-size checkpoints' configs name."""

SPM_VOCAB = 384  # 3 control pieces + 256 byte-fallback pieces + characters and a few merges
VOCAB_SIZE = 400

# (content, special) in id order from SPM_VOCAB; `<|LOC_*|>` stand in for ERNIE's non-special added tokens.
ADDED = [("<|begin_of_sentence|>", True), ("<|end_of_sentence|>", True), ("<|IMAGE_PLACEHOLDER|>", True),
         ("<|IMAGE_START|>", True), ("<|IMAGE_END|>", True), ("<|VIDEO_PLACEHOLDER|>", True), ("<mask:1>", True),
         ("<|LOC_0|>", False), ("<|LOC_1|>", False)]
TOKEN_IDS = {"<unk>": 0, "<s>": 1, "</s>": 2, **{tok: SPM_VOCAB + i for i, (tok, _) in enumerate(ADDED)}}
# the image and video token ids of a PaddleOCR-VL config.json
SPECIAL_IDS = dict(image_token_id=TOKEN_IDS["<|IMAGE_PLACEHOLDER|>"], video_token_id=TOKEN_IDS["<|VIDEO_PLACEHOLDER|>"],
                   vision_start_token_id=TOKEN_IDS["<|IMAGE_START|>"], vision_end_token_id=TOKEN_IDS["<|IMAGE_END|>"])

HUB_CHAT_TEMPLATE = """{%- if not add_generation_prompt is defined -%}
    {%- set add_generation_prompt = true -%}
{%- endif -%}
{%- if not cls_token is defined -%}
    {%- set cls_token = "<|begin_of_sentence|>" -%}
{%- endif -%}
{%- if not eos_token is defined -%}
    {%- set eos_token = "</s>" -%}
{%- endif -%}
{%- if not image_token is defined -%}
    {%- set image_token = "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>" -%}
{%- endif -%}
{{- cls_token -}}
{%- for message in messages -%}
    {%- if message["role"] == "user" -%}
        {{- "User: " -}}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "image" -%}
                {{ image_token }}
            {%- endif -%}
        {%- endfor -%}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] }}
            {%- endif -%}
        {%- endfor -%}
        {{ "\\n" -}}
    {%- elif message["role"] == "assistant" -%}
        {{- "Assistant: " -}}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] }}
            {%- endif -%}
        {%- endfor -%}
        {{ eos_token -}}
    {%- elif message["role"] == "system" -%}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] + "\\n" }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "Assistant: " -}}
{%- endif -%}
"""
