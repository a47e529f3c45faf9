"""Shared load path of the VLM packages: weights into the Cell, runtime, pipeline."""

import contextlib
import os
import threading
import time

import mindspore as ms

from ms_ocr.compile_cache import CompileCache, runtime_key
from ms_ocr.config_utils import read_json
from ms_ocr.convert import hugepages
from ms_ocr.convert.loader import is_state, load_weights
from ms_ocr.convert.safetensors_io import has_weights, iter_checkpoint, same_values, tensor_index
from ms_ocr.convert.quantize import Int8Plan
from ms_ocr.models.quantize import finish_int8, prepare_int8
from ms_ocr.ops import bind
from ms_ocr.plan import make_plan
from ms_ocr.runtime import Buckets, VLMRuntime
from ms_ocr.runtime.host_step import model_refusal
from ms_ocr.vlm import VLMPipeline


def decoder_buffers(model):
    """(ptr, nbytes) of the weights a decode step reads: every decoder layer's Parameters (not the KV caches) and
    the head (the embedding table when tied), largest first."""
    params = [p for layer in model.text_layers() for p in layer.get_parameters() if not is_state(p.name)]
    params.append(model.model.embed_tokens.weight if model.tied else model.lm_head.weight)
    out = {p.data_ptr(): p.nbytes for p in params if p.nbytes}
    return sorted(out.items(), key=lambda kv: -kv[1])


def collapse_in_background(model, default=True):
    """Start `collapse` of the decoder's weights on a daemon thread (None when turned off or unsupported): the
    thread, whose `result` holds collapse's counts when it ends. `default`: whether to, unless MS_OCR_HUGE_PAGES
    says."""
    if not hugepages.enabled(default):
        return None
    try:
        buffers = decoder_buffers(model)
    except (AttributeError, RuntimeError, TypeError, ValueError):  # an optimisation: it never fails a load
        return None

    def run():
        try:  # the lowest priority: the copies take the CPU time prefill and decode leave
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError:
            pass
        thread.result = hugepages.collapse(buffers)
    thread = threading.Thread(target=run, name="ms_ocr-hugepages", daemon=True)
    thread.result = None
    thread.start()
    return thread


def eos_ids(model_dir, default):
    """generation_config.json's eos_token_id (int or list), else the config's."""
    path = os.path.join(model_dir, "generation_config.json")
    eos = read_json(path).get("eos_token_id") if os.path.isfile(path) else None
    if eos is None:
        eos = default
    return [eos] if isinstance(eos, int) else list(eos)


def resolve_tied_head(cfg, model_dir, table, embed="model.embed_tokens.weight", head="lm_head.weight"):
    """Set `cfg.text.tie_word_embeddings` to what transformers 5.25 runs for this folder and return `cfg`.

    Its loader ties lm_head to the input embeddings when the config asks for it (for the hub's flat PaddleOCR-VL
    and HunyuanOCR files it always does: a root `tie_word_embeddings` lands in the text config's default), *unless*
    the checkpoint stores an lm_head whose values differ from the embeddings: then it loads that head, whatever
    the flag says. Without this check a flat hub folder with its own head ran a tied head (wrong tokens).
    `table` maps checkpoint names to ours (to find the embeddings under either layout's name)."""
    if not cfg.text.tie_word_embeddings or not has_weights(model_dir):  # host files only (MindIR export folder)
        return cfg
    index = tensor_index(model_dir)
    heads = [n for n in index if n == head or table(n) == head]
    embeds = [n for n in index if table(n) == embed]
    if heads and embeds and not same_values(index[heads[0]], index[embeds[0]]):
        cfg.text.tie_word_embeddings = False
    return cfg


_STAGED = []  # set by staged_weights(): the next load_pipeline defers the text weights


@contextlib.contextmanager
def staged_weights():
    """Pipelines loaded inside the block load the vision side's weights only; the text side's are loaded by
    VLMPipeline.run once the images are encoded, after the vision weights are released. For a process that
    reads one request (the CLI on one image): the two halves of the weights are never resident together."""
    _STAGED.append(True)
    try:
        yield
    finally:
        _STAGED.pop()


def text_parameter_names(net):
    """The decoder's Parameters (embeddings, layers, norm, an untied head); the rest is the vision side."""
    names = {p.name for p in net.model.get_parameters() if not is_state(p.name)}
    if not net.tied:
        names.add(net.lm_head.weight.name)
    return names


def native_layers(net, kernels, compute_dtype):
    """Whether the CPU decode step runs every layer of `net` through the native DecodeLayer (make_plan's question:
    the host step, runtime/host_step.py, would serve it)."""
    return model_refusal(net, kernels, compute_dtype) is None


def load_pipeline(name, model_dir, cfg, processor, net, table, vision_inputs, num_pos_axes, t0, target="CPU",
                  dtype="auto", buckets=None, postprocess=None, quantize="none", task_inputs=None,
                  kv_cache_dtype="auto", line_height=None):
    """Load the checkpoint of `model_dir` into `net` (strict, via the rename `table`) and wrap it, under the plan
    (ms_ocr/plan.py) made from `target`, the checkpoint and the options: its kernels bound to `net` before any graph
    of it is built, its dtypes given to the loader, the plan to the runtime. quantize="int8": the decoder's dense
    layers and the head (a tied one's embedding table) in weight-only int8, made from the loaded values
    (models/quantize.py; CPU only). `task_inputs`: what named tasks change around the model (vlm.TaskInputs).
    `kv_cache_dtype`: auto, fp32 or bf16 (plan.resolve_kv_dtype)."""
    plan = make_plan(target, net, model_dir, dtype, quantize, kv_cache_dtype, native_layers)
    bind(net, plan.kernels)
    keep = plan.bf16_names(net)
    int8 = prepare_int8(net, plan) if plan.int8_group is not None else Int8Plan()
    compute_dtype = plan.compute_dtype

    def load(only=None):
        load_weights(net, iter_checkpoint(model_dir, raw_bf16=True), table, compute_dtype, plan.round_to,
                     source=model_dir, keep_bf16=keep, only=only, int8=int8)
        net.widen_embeddings = net.model.embed_tokens.weight.dtype == ms.bfloat16 and compute_dtype == ms.float32
        if int8 and (only is None or only & text):
            finish_int8(net)
        if plan.target == "CPU" and (only is None or only & text):  # the decoder's weights onto 2 MB pages, meanwhile
            collapse_in_background(net, default=not staged)  # (not for the one-request CLI's: see hugepages.py)

    staged = bool(_STAGED)
    text = text_parameter_names(net)
    vision = [p for p in net.get_parameters() if not is_state(p.name) and p.name not in text]
    # staged: the ViT layers' weights are read as each layer first runs (runtime/vision.py stream_layers), so
    # at most one layer's are resident with the vision activations
    layers = [{p.name for p in layer.get_parameters() if not is_state(p.name)}
              for layer in net.vision_layers()] if staged else []
    load(only={p.name for p in vision} - set().union(*layers) if staged else None)
    buckets = buckets or Buckets()
    if os.path.isfile(os.path.join(model_dir, "config.json")):
        CompileCache.activate(runtime_key(name, model_dir, plan, net, buckets, keep))
    runtime = VLMRuntime(net, plan, cfg.text.max_position_embeddings, pad_id=0, buckets=buckets)
    pipe = VLMPipeline(name, model_dir, cfg, processor, runtime, vision_inputs,
                       eos_ids(model_dir, cfg.text.eos_token_id), num_pos_axes, cfg.image_token_id,
                       load_seconds=time.perf_counter() - t0, postprocess=postprocess, task_inputs=task_inputs,
                       line_height=line_height)
    if staged:
        pipe.stage_text_weights(lambda: load(only=text), vision)
        runtime.vision.stream_layers(net.vision_layers(),
                                     lambda names: load(only={n for n in names if not is_state(n)}))
    return pipe
