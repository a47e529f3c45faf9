"""The model registry: one line per VLM package (ms_ocr/models/<package>/, declared in its spec.py as a ModelSpec).

Every command line's --model names, --task help, --mode choices, the hub ids and the document pipeline's
recognisers are derived from these specs (ms_ocr/models/spec.py); reading them imports no framework."""

import importlib
import os
from functools import lru_cache

REGISTRY = (
    "paddleocr_vl",
    "hunyuan_vl",
    "deepseek_ocr",
    "deepseek_ocr2",
    "unlimited_ocr",
)


@lru_cache(maxsize=None)
def specs():
    """The registered ModelSpecs, in registry order. Two specs claiming one name is an error."""
    out, seen = [], {}
    for package in REGISTRY:
        spec = importlib.import_module(f"ms_ocr.models.{package}.spec").SPEC
        if spec.package != package:
            raise ValueError(f"ms_ocr/models/{package}/spec.py declares package {spec.package!r}")
        for name in spec.names:
            if name in seen:
                raise ValueError(f"model name {name!r} is claimed by {seen[name]} and {package}")
            seen[name] = package
        out.append(spec)
    return tuple(out)


def names():
    """The command-line model names (--model), in registry order."""
    return [s.name for s in specs()]


def get(name):
    """The ModelSpec of a --model name, an alias or a package name (case-insensitive); ValueError if unknown."""
    key = name.lower() if isinstance(name, str) else name
    for spec in specs():
        if key in spec.names or key == spec.package:
            return spec
    raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(names())}")


def canonical(name):
    """The package name of a --model name (what converted checkpoints and exports record)."""
    return get(name).package


def tasks_help():
    """'<model>: task, task; ...' for the --task help of every command line (a model with versions: each version's,
    the checkpoint's files say which applies)."""
    def one(spec):
        (own, _), *others = spec.all_versions()
        tasks = f"{spec.name}: {', '.join(spec.tasks)}" + (f" ({own})" if others else "")
        return "; ".join([tasks] + [f"{spec.name} {name}: {', '.join(v.tasks)}" for name, v in others])
    return "; ".join(one(s) for s in specs())


def modes():
    """Every resolution mode some model has (--mode choices), in first-seen order."""
    return list(dict.fromkeys(m for s in specs() for m in s.modes))


def modes_help():
    with_modes = [s for s in specs() if s.modes]
    return "; ".join(f"{s.name} resolution mode (default {s.default_mode})" for s in with_modes)


def check_mode(spec, mode):
    """ValueError when --mode is given for a model without modes, or a mode it does not have."""
    if mode is None:
        return
    if not spec.modes:
        owners = ", ".join(s.name for s in specs() if s.modes)
        raise ValueError(f"--mode applies to {owners}, not {spec.name}")
    if mode not in spec.modes:
        raise ValueError(f"--mode {mode} is not a mode of {spec.name}; choose one of: {', '.join(spec.modes)}")


# The embedded demo checkpoint (scripts/train_demo.py): what `infer` runs when no --model is given and no weights
# are found. A demonstration of the port, not PaddleOCR-VL's accuracy (ms_ocr/demo/README.md).
DEMO_MODEL = "paddleocr-vl"
DEMO_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "demo", "paddleocr_vl")


def demo_checkpoint():
    """The demo checkpoint folder, or None while the package ships none."""
    return DEMO_DIR if os.path.isfile(os.path.join(DEMO_DIR, "config.json")) else None
