"""The model contract: every VLM package declares a ModelSpec, the registry lists them, and everything outside the
folders (CLI names and choices, help texts, hub ids, the pipeline's recognisers) is derived from the specs."""

import ast
import dataclasses
import os
import subprocess
import sys

import pytest

from ms_ocr import models
from ms_ocr.models.spec import REGION_KINDS, ModelSpec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS_DIR = os.path.join(ROOT, "ms_ocr", "models")

_FIELDS = dict(name="toy-ocr", package="toy_ocr", title="a toy", hub_id="x/toy", tasks={"ocr": "OCR:", "boxes": "B:"},
               region_tasks={k: "ocr" for k in REGION_KINDS}, config="config:Config", processor="processor:P",
               model="model:M")


def test_registry_lists_each_package_once_under_its_names():
    specs = models.specs()
    assert [s.package for s in specs] == list(models.REGISTRY) == ["paddleocr_vl", "hunyuan_vl", "deepseek_ocr",
                                                                    "deepseek_ocr2", "unlimited_ocr"]
    assert models.names() == ["paddleocr-vl", "hunyuan-ocr", "deepseek-ocr", "deepseek-ocr2", "unlimited-ocr"]
    assert models.get("HunyuanOCR").package == "hunyuan_vl"  # case-insensitive alias
    assert models.get("deepseek-ocr-2") is models.get("deepseek_ocr2") is specs[3]
    assert models.canonical("paddleocr-vl") == "paddleocr_vl"
    with pytest.raises(ValueError, match="unknown model 'ocr-9'; choose one of: paddleocr-vl, hunyuan-ocr"):
        models.get("ocr-9")
    all_names = [n for s in specs for n in s.names]
    assert len(all_names) == len(set(all_names)) == 12


@pytest.mark.parametrize("spec", models.specs(), ids=lambda s: s.name)
def test_every_reference_resolves_to_what_the_loader_calls(spec):
    assert hasattr(spec.resolve("config"), "from_dict")
    assert hasattr(spec.resolve("processor"), "from_pretrained")
    for ref in ("model", "rename", "vision_inputs"):
        assert callable(spec.resolve(ref)), ref
    assert spec.postprocess is None or callable(spec.resolve("postprocess"))
    assert spec.resolve("model") is spec.resolve("model")  # imported once
    assert list(spec.tasks)[0] == "ocr"  # the default task of every command line
    assert set(spec.region_tasks) == set(REGION_KINDS) and set(spec.region_tasks.values()) <= set(spec.tasks)


def test_deepseek_modes_are_the_processor_table():
    from ms_ocr.models.deepseek_ocr.processor import MODES
    spec = models.get("deepseek-ocr")
    assert spec.modes == tuple(MODES) and spec.default_mode == "gundam"
    assert [s.name for s in models.specs() if s.modes] == ["deepseek-ocr", "unlimited-ocr"]
    assert models.get("unlimited-ocr").modes == tuple(MODES)


def test_reading_the_registry_imports_no_framework():
    code = ("import sys; from ms_ocr import models; models.specs(); models.tasks_help(); "
            "import ms_ocr.infer; ms_ocr.infer.build_parser(); "
            "print(sorted(m for m in ('mindspore', 'numpy', 'PIL', 'tokenizers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("change, error", [
    (dict(task_prompts={"ocr": "x"}), TypeError),  # a misspelt field
    (dict(box_tasks=("spotting",)), ValueError),  # a box task that is no task
    (dict(region_tasks={"text": "ocr"}), ValueError),  # region kinds missing
    (dict(region_tasks={**{k: "ocr" for k in REGION_KINDS}, "table": "tables"}), ValueError),
    (dict(modes=("a", "b")), ValueError),  # modes without a default
    (dict(default_mode="a"), ValueError),  # a default without modes
    (dict(no_repeat={"size": 3}), ValueError),
    (dict(model="ms_ocr.models.other_ocr.model:M"), ValueError),  # another model folder's code
    (dict(rename="convert"), ValueError),  # no attribute
    (dict(task_pixels={"spotting": (1, 2)}), ValueError),  # task handling for a task that is no task
    (dict(special_token_tasks=("spotting",)), ValueError),
    (dict(task_image="ms_ocr.models.other_ocr.host:f"), ValueError),
])
def test_a_wrong_declaration_fails_at_import(change, error):
    assert ModelSpec(**_FIELDS).name == "toy-ocr"
    with pytest.raises(error):
        ModelSpec(**{**_FIELDS, **change})
    with pytest.raises(TypeError):
        ModelSpec(**{k: v for k, v in _FIELDS.items() if k != "hub_id"})  # a missing field
    with pytest.raises(dataclasses.FrozenInstanceError):
        models.get("paddleocr-vl").name = "x"


def _parsers():
    from ms_ocr.batch.cli import build_parser as batch
    from ms_ocr.export.__main__ import build_parser as export
    from ms_ocr.infer import build_parser as infer
    from ms_ocr.pipeline.cli import build_parser as pipeline
    from ms_ocr.serve.cli import build_parser as serve
    return {"infer": infer, "batch": batch, "serve": serve, "pipeline": pipeline, "export": export}


def _option(parser, flag):
    return next(a for a in parser._actions if flag in a.option_strings)


def test_every_command_line_derives_names_tasks_and_modes_from_the_specs(monkeypatch):
    toy = ModelSpec(**{**_FIELDS, "modes": ("fine", "coarse"), "default_mode": "fine"})
    registered = models.specs()
    monkeypatch.setattr(models, "specs", lambda: (*registered, toy))
    for name, build in _parsers().items():
        p = build()
        flag = "--recognizer" if name == "pipeline" else "--model"
        option = _option(p, flag)
        shown = option.choices or option.help
        for spec in models.specs():
            assert spec.name in shown, (name, spec.name)
        if name != "pipeline":
            assert _option(p, "--mode").choices == ["tiny", "small", "base", "large", "gundam", "fine", "coarse"]
            assert "toy-ocr resolution mode (default fine)" in _option(p, "--mode").help
    task_help = _option(_parsers()["infer"](), "--task").help
    assert "toy-ocr: ocr, boxes" in task_help and "hunyuan-ocr: ocr, spotting, parse" in task_help
    with pytest.raises(ValueError, match="--mode applies to deepseek-ocr, unlimited-ocr, toy-ocr, not paddleocr-vl"):
        models.check_mode(models.get("paddleocr-vl"), "fine")
    with pytest.raises(ValueError, match="--mode tiny is not a mode of toy-ocr; choose one of: fine, coarse"):
        models.check_mode(toy, "tiny")


def test_model_folders_never_import_each_other():
    packages = [d for d in os.listdir(MODELS_DIR) if os.path.isfile(os.path.join(MODELS_DIR, d, "__init__.py"))]
    found = []
    for package in packages:
        folder = os.path.join(MODELS_DIR, package)
        for fn in sorted(os.listdir(folder)):
            if not fn.endswith(".py"):
                continue
            for node in ast.walk(ast.parse(open(os.path.join(folder, fn), encoding="utf-8").read())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                for name in names:
                    parts = name.split(".")
                    if parts[:2] == ["ms_ocr", "models"] and len(parts) > 2 and parts[2] in packages \
                            and parts[2] != package:
                        found.append(f"{package}/{fn}: {name}")
    assert found == []
    assert len(packages) == 5  # the five VLMs (the layout models live in ms_ocr/layout/)


def test_the_loader_checks_the_mode_as_the_command_lines_do(tmp_path):
    """spec.host_side / load refuse a mode the model does not have with check_mode's message, before any file is
    read (the MindIR loader passes the export's recorded mode)."""
    with pytest.raises(ValueError, match="--mode applies to deepseek-ocr, unlimited-ocr, not paddleocr-vl"):
        models.get("paddleocr-vl").host_side(str(tmp_path / "absent"), "tiny")
    with pytest.raises(ValueError, match="--mode huge is not a mode of deepseek-ocr"):
        models.get("deepseek-ocr").host_side(str(tmp_path / "absent"), "huge")
