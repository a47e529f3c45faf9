"""ModelSpec: what a VLM package declares about itself, and the one loader every package shares.

A model package (ms_ocr/models/<package>/) declares `SPEC = ModelSpec(...)` in its `spec.py`; the registry
(ms_ocr/models/__init__.py) lists the packages. Everything outside the folder (CLI names and choices, help texts,
hub ids, the document pipeline's region tasks, the server's defaults, the loader) reads the spec. The spec module
is plain data: the classes and functions that need NumPy or MindSpore are named as "module:attribute" references
to modules of the package's own folder, imported on first use, so reading the registry (e.g. for `--help`)
imports no framework.

Declaring is checked at import: an unknown or missing field is a TypeError (keyword-only dataclass), a task list
that contradicts itself or a reference outside the package's own folder is a ValueError."""

import dataclasses
import functools
import importlib
import time
from dataclasses import dataclass, field

REGION_KINDS = ("text", "table", "formula", "chart")  # the document pipeline's recognised region kinds
NO_REPEAT_KEYS = {"size", "window", "exempt_tokens"}


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    name: str  # the command-line name (--model), e.g. "paddleocr-vl"
    package: str  # ms_ocr.models.<package>; also the name in converted checkpoints' meta
    title: str  # one line for help texts and READMEs
    aliases: tuple = ()  # further accepted --model spellings
    hub_id: str  # where the weights are published (the "how to get them" message, optional download)
    hub_subfolder: str = None  # the supported checkpoint's folder in the hub repository, if not the root
    tasks: dict  # task name -> prompt; the first is the default task
    box_tasks: tuple = ()  # tasks whose output carries boxes (--visualize, `boxes` in --json)
    region_tasks: dict  # document pipeline: region kind (REGION_KINDS) -> task
    modes: tuple = ()  # resolution modes (--mode); empty: the model has none
    default_mode: str = None
    no_repeat: dict = None  # default n-gram blocking: {"size", "window", "exempt_tokens"}
    # decoding as the model's reference client runs it, each the default of a request that names none
    repetition_penalty: float = 1.0
    stop_rules: tuple = ()  # ms_ocr.stop_rules rules (e.g. TailRepetition)
    postprocess_options: dict = None  # keyword options of `postprocess` -> their defaults (entry points override)
    # "module:attribute" references into the package's folder (ms_ocr/models/<package>/<module>.py), imported on
    # first use
    config: str  # class with from_dict(raw config.json) -> config; its num_pos_axes / image_token_id / text
    processor: str  # class with from_pretrained(model_dir, cfg[, mode])
    model: str  # the VLMCell class, built from the config
    rename: str = "convert:name_table"  # name_table(cfg) -> RenameTable (hub weight names -> ours)
    vision_inputs: str = "host:vision_inputs"  # (cfg, processor output) -> per-image VisionInputs
    postprocess: str = None  # (text, task, images) -> (text, extras)
    # what a task changes around the model, as the model's reference client does it (vlm.TaskInputs)
    task_pixels: dict = None  # task -> (min_pixels, max_pixels) its images are resized to
    task_image: str = None  # "module:function": (PIL image, task) -> the image the reference client sends
    special_token_tasks: tuple = ()  # tasks whose answer keeps its special tokens (boxes written as tokens)
    # its checkpoints may read single text lines: preprocessor_config.json's ms_ocr key `text_line_height` (the demo
    # model) makes a checkpoint a line reader, run through ms_ocr/line_reader.py
    line_reader: bool = False
    # checkpoint versions the model's authors run differently: the fields above describe `version`; `versions` maps
    # each other version to the fields it changes; `recognise` ("module:function": checkpoint folder -> version
    # name, CheckpointError when the files cannot tell) picks one (for_checkpoint)
    version: str = None
    versions: dict = None
    recognise: str = None
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        where = f"ModelSpec {self.name!r}"
        if not self.tasks:
            raise ValueError(f"{where}: no tasks")
        for task in self.box_tasks:
            if task not in self.tasks:
                raise ValueError(f"{where}: box task {task!r} is not a task")
        if set(self.region_tasks) != set(REGION_KINDS):
            raise ValueError(f"{where}: region_tasks must map exactly {REGION_KINDS}")
        for kind, task in self.region_tasks.items():
            if task not in self.tasks:
                raise ValueError(f"{where}: region {kind!r} uses unknown task {task!r}")
        if bool(self.modes) != (self.default_mode is not None) or (self.modes and self.default_mode not in self.modes):
            raise ValueError(f"{where}: default_mode must be one of modes (and only given with modes)")
        if self.no_repeat is not None and set(self.no_repeat) != NO_REPEAT_KEYS:
            raise ValueError(f"{where}: no_repeat needs exactly {sorted(NO_REPEAT_KEYS)}")
        for task in tuple(self.task_pixels or ()) + tuple(self.special_token_tasks):
            if task not in self.tasks:
                raise ValueError(f"{where}: task {task!r} of task_pixels / special_token_tasks is not a task")
        if self.versions and (self.recognise is None or self.version is None):
            raise ValueError(f"{where}: versions need a version name for the declared fields and a recogniser")
        for name, changes in (self.versions or {}).items():
            if name == self.version or "versions" in changes or "version" in changes:
                raise ValueError(f"{where}: version {name!r} must name another version and change fields only")
        for ref in ("config", "processor", "model", "rename", "vision_inputs", "postprocess", "task_image",
                    "recognise"):
            value = getattr(self, ref)
            if value is None and ref in ("postprocess", "task_image", "recognise"):
                continue
            module, _, attr = (value or "").partition(":")
            if not module.isidentifier() or not attr.isidentifier():
                raise ValueError(f"{where}: {ref} must be '<module>:<name>' of a module in ms_ocr/models/"
                                 f"{self.package}/, not {value!r} (a model folder uses its own code; shared code "
                                 "lives in nn/ or processing/)")

    @property
    def names(self):
        return (self.name, *self.aliases)

    def resolve(self, ref):
        """The object a reference field names (imported once)."""
        if ref not in self._cache:
            value = getattr(self, ref)
            if value is None:
                self._cache[ref] = None
            else:
                module, _, attr = value.partition(":")
                self._cache[ref] = getattr(importlib.import_module(f"ms_ocr.models.{self.package}.{module}"), attr)
        return self._cache[ref]

    def for_checkpoint(self, model_dir):
        """The spec of the checkpoint in `model_dir`: this one, or the one of the version its files say it is
        (`recognise`); a folder that cannot be told apart raises CheckpointError (one line naming the candidates)."""
        if self.recognise is None:
            return self
        name = self.resolve("recognise")(model_dir)
        if name == self.version:
            return self
        from ms_ocr import models
        base = models.get(self.name)
        if name == base.version:
            return base
        if name not in base.versions:
            raise ValueError(f"{self.name}: recogniser returned unknown version {name!r}")
        return dataclasses.replace(base, **base.versions[name], version=name, versions=None)

    def all_versions(self):
        """(version name, spec) of every version the model declares (this spec alone when it has none)."""
        if not self.versions:
            return [(self.version, self)]
        return [(self.version, self)] + [(name, dataclasses.replace(self, **changes, version=name, versions=None))
                                         for name, changes in self.versions.items()]

    # the shared load path -------------------------------------------------------------------------------------
    def config_from_dir(self, model_dir):
        """The checkpoint folder's config, with the tied/untied head resolved as transformers runs it."""
        from ms_ocr.config_utils import load_config_json
        from ms_ocr.models.loading import resolve_tied_head
        cfg = self.resolve("config").from_dict(load_config_json(model_dir))
        return resolve_tied_head(cfg, model_dir, self.name_table(cfg))

    def name_table(self, cfg):
        return self.resolve("rename")(cfg)

    def build(self, cfg):
        return self.resolve("model")(cfg)

    def host_side(self, model_dir, mode=None):
        """What runs outside the graphs (also for MindIR serving): config, processor, per-image vision inputs,
        output post-processing (with the spec's postprocess_options as its defaults), for the checkpoint's version
        (for_checkpoint; "spec")."""
        spec = self.for_checkpoint(model_dir)
        if spec is not self:
            return spec.host_side(model_dir, mode)
        from ms_ocr import models
        models.check_mode(self, mode)  # the command lines' check: a mode of this model, or none
        cfg = self.config_from_dir(model_dir)
        extra = (mode or self.default_mode,) if self.modes else ()
        vision_inputs = self.resolve("vision_inputs")
        postprocess = self.resolve("postprocess")
        if postprocess is not None and self.postprocess_options:
            postprocess = functools.partial(postprocess, **self.postprocess_options)
        from ms_ocr.vlm import TaskInputs, text_line_height
        return {"spec": self, "cfg": cfg,
                "processor": self.resolve("processor").from_pretrained(model_dir, cfg, *extra),
                "line_height": text_line_height(model_dir) if self.line_reader else None,
                "vision_inputs": lambda out: vision_inputs(cfg, out), "postprocess": postprocess,
                "task_inputs": TaskInputs(dict(self.task_pixels or {}), self.resolve("task_image"),
                                          tuple(self.special_token_tasks), dict(self.tasks))}

    def load(self, model_dir, target="CPU", dtype="auto", buckets=None, mode=None, quantize="none",
             kv_cache_dtype="auto"):
        """The VLMPipeline of a hub or converted checkpoint folder (quantize: "none" or "int8", models/quantize.py;
        kv_cache_dtype: auto, fp32 or bf16, plan.resolve_kv_dtype). The pipeline's `spec` is the checkpoint
        version's (for_checkpoint)."""
        from ms_ocr.models.loading import load_pipeline
        t0 = time.perf_counter()
        host = self.host_side(model_dir, mode)
        cfg = host["cfg"]
        pipe = load_pipeline(self.name, model_dir, cfg, host["processor"], self.build(cfg), self.name_table(cfg),
                             host["vision_inputs"], cfg.num_pos_axes, t0, target, dtype, buckets,
                             postprocess=host["postprocess"], quantize=quantize, task_inputs=host["task_inputs"],
                             kv_cache_dtype=kv_cache_dtype, line_height=host["line_height"])
        pipe.spec = host["spec"]
        return pipe
