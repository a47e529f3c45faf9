"""Every implementation of an interface of ms_ocr/interfaces.py has every member it states: each registered model's
Cell (VLMModel and its tower kind's), both runtimes, each registered model's processor. A method is looked up on the
class; an attribute on the class or assigned to `self` in the source of the class or a base (`kernels`: bound to every
Cell by the loader)."""

import inspect

import pytest

from ms_ocr import interfaces, models


def _members(protocol):
    """(methods, attributes) a Protocol states, its bases' included."""
    methods, attributes = set(), set()
    for cls in protocol.__mro__:
        if cls.__module__ != interfaces.__name__:
            continue
        attributes |= set(getattr(cls, "__annotations__", {}))
        methods |= {name for name, value in vars(cls).items() if inspect.isfunction(value)
                    and (not name.startswith("__") or name == "__call__")}
    return methods, attributes


def _assigned(cls):
    """Names a class, or a base of it, assigns to `self` or defines in its body."""
    names = set()
    for base in cls.__mro__:
        if base is object:
            continue
        names |= set(vars(base))
        try:
            source = inspect.getsource(base)
        except (OSError, TypeError):
            continue
        names |= {part.split("=")[0].split(".")[1].strip() for line in source.splitlines()
                  for part in line.split(",") if part.strip().startswith("self.") and "=" in line}
    return names


BOUND = {"kernels"}  # set on every Cell of a model by the loader (ops.bind)


def _missing(cls, protocol):
    methods, attributes = _members(protocol)
    absent = sorted(m for m in methods if not callable(getattr(cls, m, None)))
    return absent + sorted(a for a in attributes - BOUND if a not in _assigned(cls))


SPECS = models.specs()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_each_model_cell_is_a_vlm_model_of_its_tower_kind(spec):
    from ms_ocr.nn.vlm import ViewsModel, ViTStackModel
    cell = spec.resolve("model")
    assert issubclass(cell, (ViTStackModel, ViewsModel))
    tower = interfaces.ViTStackTower if issubclass(cell, ViTStackModel) else interfaces.ViewsTower
    assert _missing(cell, interfaces.VLMModel) == [] and _missing(cell, tower) == []


@pytest.mark.parametrize("runtime", ["ms_ocr.runtime.core:VLMRuntime", "ms_ocr.export.mindir:MindIRRuntime"])
def test_both_runtimes_state_the_runtime_interface(runtime):
    import importlib
    module, _, name = runtime.partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert interfaces.Runtime in cls.__mro__  # it says so
    assert _missing(cls, interfaces.Runtime) == []
    if name == "VLMRuntime":  # the host writes its caches off Ascend
        assert _missing(cls, interfaces.HostCacheRuntime) == []


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_each_processor_is_a_processor(spec):
    assert _missing(spec.resolve("processor"), interfaces.Processor) == []


def test_the_checks_find_what_is_missing():
    class Half:
        tokenizer = None

        def __call__(self, images, prompt):
            return {}

    assert _missing(Half, interfaces.Processor) == ["decode", "mode"]
