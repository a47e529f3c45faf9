"""Chat templates found and rendered as transformers does it (utils/chat_template_utils.py, processing_utils.py).

Rendering uses the same sandboxed Jinja environment (trim_blocks, lstrip_blocks, loopcontrols, `tojson`,
`raise_exception`, `strftime_now`, guarded `dict` / `namespace`) and the same variables: `messages`,
`tools=None`, `documents=None`, `add_generation_prompt`, plus whatever the caller passes, which for parity is
the tokenizer's named special tokens (`Tokenizer.special_tokens`), as transformers passes
`tokenizer.special_tokens_map`.
"""

import json
import os
from datetime import datetime
from functools import lru_cache

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ms_ocr.config_utils import CheckpointError, read_json


def _pick_default(template, where):
    """A template entry: a string, a list of {name, template}, or a dict of named templates -> "default"."""
    if isinstance(template, list):
        template = {t["name"]: t["template"] for t in template}
    if isinstance(template, dict):
        if "default" not in template:
            raise CheckpointError(f"{where} has chat templates {sorted(template)} but none named 'default'")
        template = template["default"]
    return template


def load_chat_template(model_dir):
    """The chat template of a checkpoint folder, in transformers' processor precedence.

    processor_config.json "chat_template", then the legacy chat_template.json (transformers lets it win over
    chat_template.jinja), then chat_template.jinja, then tokenizer_config.json "chat_template" (the template
    transformers' tokenizer would use).
    """
    def path(name):
        return os.path.join(model_dir, name)

    if os.path.isfile(path("processor_config.json")):
        template = read_json(path("processor_config.json")).get("chat_template")
        if template:
            return _pick_default(template, path("processor_config.json"))
    if os.path.isfile(path("chat_template.json")):
        return _pick_default(read_json(path("chat_template.json"))["chat_template"], path("chat_template.json"))
    if os.path.isfile(path("chat_template.jinja")):
        with open(path("chat_template.jinja"), encoding="utf-8") as f:
            return f.read()
    if os.path.isfile(path("tokenizer_config.json")):
        template = read_json(path("tokenizer_config.json")).get("chat_template")
        if template:
            return _pick_default(template, path("tokenizer_config.json"))
    raise CheckpointError(f"no chat template in {model_dir} (looked for chat_template.jinja, chat_template.json, "
                          "processor_config.json and tokenizer_config.json)")


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` renders its body (transformers only tracks its span)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


class _Namespace(jinja2.utils.Namespace):
    """namespace() that refuses underscore attributes, like transformers' TemplateNamespace."""

    def __init__(*args, **kwargs):  # noqa: N805 - same signature trick as jinja2.utils.Namespace
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates cannot set namespace attribute {name!r}")


class _Dict:
    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Jinja's own tojson escapes HTML characters; templates expect plain json.dumps
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@lru_cache
def compile_template(template):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, namespace=_Namespace, dict=_Dict(),
                       strftime_now=lambda fmt: datetime.now().strftime(fmt))
    return env.from_string(template)


def _plain(value):
    """JSON-like copy of template inputs; other objects (images, arrays) become "<TypeName>" placeholders."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    for kind in (str, int, float):  # subclasses (enums, numpy scalars) drop back to the base type
        if isinstance(value, kind) and not isinstance(value, bool):
            return kind(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return _plain(value.item())
    return f"<{type(value).__name__}>"


def render_chat(template, messages, add_generation_prompt=True, tools=None, documents=None, **variables):
    """Render one conversation exactly as transformers' apply_chat_template(..., tokenize=False) does.

    Message keys whose value is None are dropped first (as the processor does); `variables` are extra template
    variables, normally `**tokenizer.special_tokens` (tools must already be JSON schemas).
    """
    messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
    return compile_template(template).render(messages=_plain(messages), tools=_plain(tools),
                                             documents=_plain(documents), add_generation_prompt=add_generation_prompt,
                                             **_plain(variables))
