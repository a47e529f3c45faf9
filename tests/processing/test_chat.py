"""Chat template discovery and rendering against transformers' apply_chat_template(..., tokenize=False)."""

import json
import shutil

import jinja2
import pytest

from ms_ocr.config_utils import CheckpointError
from ms_ocr.processing.chat import load_chat_template, render_chat
from ms_ocr.processing.tokenizer import Tokenizer
from bench.paddle_tokens import HUB_CHAT_TEMPLATE
from bench.tiny_tokenizer import write_tokenizer
from tests.helpers.tiny_paddle import HUB_PREPROCESSOR

CONVERSATIONS = [
    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "OCR:"}]}],
    [{"role": "system", "content": [{"type": "text", "text": "Be exact."}]},
     {"role": "user", "content": [{"type": "image"}, {"type": "image"},
                                  {"type": "text", "text": "Table Recognition:"}]},
     {"role": "assistant", "content": [{"type": "text", "text": "| a | b |"}]},
     {"role": "user", "content": [{"type": "text", "text": "中文 and\nnewline"}], "name": None}],
]
SOURCES = ["chat_template.jinja", "chat_template.json", "processor_config.json", "tokenizer_config.json"]


def _place(folder, source, template):
    """Write `template` into one of the places transformers reads it from (and remove it from the others)."""
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    if source == "chat_template.jinja":
        (folder / source).write_text(template)
    elif source == "chat_template.json":
        (folder / source).write_text(json.dumps({"chat_template": template}))
    elif source == "processor_config.json":
        (folder / source).write_text(json.dumps({"chat_template": template, "processor_class": "PaddleOCRVLProcessor"}))
    else:
        config["chat_template"] = template
    config_path.write_text(json.dumps(config))


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    """Tokenizer files (with `image_token`, so transformers' processor loads) + preprocessor + config."""
    out = tmp_path_factory.mktemp("chat_base")
    (out / "config.json").write_text(json.dumps({"model_type": "paddleocr_vl"}))
    (out / "preprocessor_config.json").write_text(json.dumps(HUB_PREPROCESSOR))
    write_tokenizer(str(out), "json", "transformers", seed=0)
    return out


@pytest.mark.parametrize("source", SOURCES)
def test_each_source_renders_like_transformers(base_dir, tmp_path, source):
    from transformers import AutoProcessor, AutoTokenizer

    folder = tmp_path / "ckpt"
    shutil.copytree(base_dir, folder)
    _place(folder, source, HUB_CHAT_TEMPLATE)
    template = load_chat_template(str(folder))
    assert template == HUB_CHAT_TEMPLATE
    tokenizer = Tokenizer.from_dir(str(folder))
    # transformers' processor reads the first three places; its tokenizer reads tokenizer_config.json
    ref = (AutoTokenizer if source == "tokenizer_config.json" else AutoProcessor).from_pretrained(str(folder))
    for messages in CONVERSATIONS:
        for generation_prompt in (True, False):
            want = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
            got = render_chat(template, messages, add_generation_prompt=generation_prompt, **tokenizer.special_tokens)
            assert got == want


def test_image_token_variable_changes_the_prompt(base_dir):
    # The hub template wraps images in IMAGE_START/END only while `image_token` is undefined; a tokenizer config
    # carrying `image_token` (which transformers' processor needs) defines it, so the wrapper disappears.
    tokenizer = Tokenizer.from_dir(str(base_dir))
    user = CONVERSATIONS[0]
    assert render_chat(HUB_CHAT_TEMPLATE, user, **tokenizer.special_tokens) == (
        "<|begin_of_sentence|>User: <|IMAGE_PLACEHOLDER|>OCR:\nAssistant: ")
    specials = {k: v for k, v in tokenizer.special_tokens.items() if k != "image_token"}
    assert render_chat(HUB_CHAT_TEMPLATE, user, **specials) == (
        "<|begin_of_sentence|>User: <|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>OCR:\nAssistant: ")
    assert render_chat(HUB_CHAT_TEMPLATE, user, add_generation_prompt=False, **specials).endswith("OCR:\n")


def test_precedence_and_template_lists(base_dir, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(base_dir, folder)
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": "from json"}))
    assert load_chat_template(str(folder)) == "from json"  # the legacy json wins over .jinja, as in transformers
    (folder / "processor_config.json").write_text(json.dumps({"chat_template": "from processor config"}))
    assert load_chat_template(str(folder)) == "from processor config"
    for name in ("chat_template.json", "processor_config.json", "chat_template.jinja"):
        (folder / name).unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain"}]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert load_chat_template(str(folder)) == "plain"
    config["chat_template"] = [{"name": "tool_use", "template": "tools"}]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="none named 'default'"):
        load_chat_template(str(folder))
    del config["chat_template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="no chat template in"):
        load_chat_template(str(folder))


FEATURES = """{%- set ns = namespace(count=0) -%}
{%- for m in messages -%}
{%- if m.role == "system" %}{% continue %}{% endif -%}
{%- set ns.count = ns.count + 1 -%}
{{ m.content | tojson }}|{{ dict(a=1, b="é") | tojson(indent=1) }}|{{ tools }}|{{ documents }}
{%- if loop.index > 2 %}{% break %}{% endif -%}
{% generation %}<{{ ns.count }}>{% endgeneration %}
{% endfor -%}
{{ bos_token ~ strftime_now("%Y")[:2] }}{{ add_generation_prompt }}"""


def test_template_features_match_transformers():
    from transformers.utils.chat_template_utils import render_jinja_template

    messages = [{"role": "system", "content": "skip me"}, {"role": "user", "content": "<b>ü \"q\"</b>"},
                {"role": "assistant", "content": [{"type": "text", "text": "x"}]}, {"role": "user", "content": "z"},
                {"role": "user", "content": "never"}]
    for generation_prompt in (True, False):
        want = render_jinja_template(conversations=[messages], chat_template=FEATURES,
                                     add_generation_prompt=generation_prompt, bos_token="<s>")[0][0]
        assert render_chat(FEATURES, messages, add_generation_prompt=generation_prompt, bos_token="<s>") == want
    assert '"<b>ü \\"q\\"</b>"' in want and want.endswith("<s>20False")


def test_template_errors():
    with pytest.raises(jinja2.exceptions.TemplateError, match="no system role"):
        render_chat('{{ raise_exception("no system role") }}', [])
    with pytest.raises(jinja2.exceptions.SecurityError):
        render_chat("{% set ns = namespace(_private=1) %}", [])
    with pytest.raises(jinja2.exceptions.SecurityError):
        render_chat("{{ messages.append(1) }}", [])  # the sandbox is immutable
