"""MindIR export of a loaded VLM and a runner that generates from the exported files alone.

Graphs per model, weights baked in:
  vision.mindir  (ViT-stack models: PaddleOCR-VL, HunyuanOCR) one image's vision inputs (embed + head arrays)
                 -> image tokens; the patch count is a dynamic dimension (one file serves every image size);
  vision_<S>.mindir + assemble.mindir  (DeepEncoder models: DeepSeek-OCR v1/v2) one graph per square view
                 side S the processor produces (static shapes; tiles go one per call), and the assembly of an
                 image's view tokens with the newline / separator rows in the host's order;
  text.mindir    input_ids [B, S], image tokens [M, H], image row index [B, S], rope positions [A, B, S],
                 cache positions [B, S], slot_ids [T], last index [B] -> logits [B, V]. S and M are dynamic, so
                 the same graph runs the prefill (S = prompt length) and every decode step (S = 1). MoE layers
                 run every expert on every token (ms_ocr/nn/moe.py `dense`): no dispatch is left to the host.
The KV cache is a Parameter of text.mindir updated in place (scatter_update): measured here, a GraphCell loaded
from MindIR keeps in-place Parameter updates across calls, so no cache copy per step; since prefill and decode
must share that cache they are one graph (two MindIR files cannot share a Parameter). The cache size (B
sequences x T positions) is fixed at export (--batch, --slots).
"""

import json
import os
import shutil
import time

import numpy as np
import mindspore as ms
from mindspore import ParameterTuple, Tensor, nn, ops

from ms_ocr import ops as K
from ms_ocr.interfaces import Runtime
from ms_ocr.nn import functional as F
from ms_ocr.nn.vlm import ViewsModel, ViTStackModel
from ms_ocr.runtime import RequestTooLong, host_tensor
from ms_ocr.steps import merge_image_features

FORMAT_VERSION = 2  # 2: meta["vision"] (kind of vision graphs); 1 = ViT kind
# Files a serving folder needs besides the graphs: the processor's and tokenizer's.
HOST_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "processor_config.json",
              "tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
              "chat_template.jinja", "chat_template.json", "added_tokens.json")


class ExportError(ValueError):
    pass


def _resolve(cell, name):
    obj = cell
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


class VisionGraph(nn.Cell):
    """The whole vision tower of a ViT-stack model (embed, every layer, head) for one image.

    Weights are held as ParameterTuples per layer (a graph cannot walk attribute names); attention is the
    full bidirectional softmax over the image (the layer-by-layer runtime chunks queries to bound CPU memory)."""

    def __init__(self, model, n_embed):
        super().__init__(auto_prefix=False)
        if not isinstance(model, ViTStackModel):
            raise ExportError("this model's vision tower is not a ViT layer stack; its export is not supported yet")
        layers = model.vision_layers()
        self.model, self.kernels = model, model.kernels
        spec = layers[0].spec
        self.heads, self.eps, self.act, self.rope = spec["heads"], spec["eps"], spec["act"], spec["rope"]
        self.scale = spec["dim"] ** -0.5
        self.w_in = tuple(ParameterTuple([_resolve(l, n) for n in l.attn_in_names]) for l in layers)
        self.w_out = tuple(ParameterTuple([_resolve(l, n) for n in l.out_names]) for l in layers)
        self.count = len(layers)
        self.n_embed = n_embed

    def construct(self, *inputs):
        # inputs: the model's n_embed vision_embed arrays, then its vision_head arrays
        out = self.model.vision_embed(*inputs[:self.n_embed])
        if self.rope:
            x, cos, sin = out
        else:
            x, cos, sin = out, None, None
        kn = self.kernels
        for i in range(self.count):
            q, k, v = F.vit_attention_in(kn, x, cos, sin, self.w_in[i], self.heads, self.eps)
            x = F.vit_out_mlp(kn, x, K.attention_rows(kn, q, k, v, self.scale), self.w_out[i], self.eps, self.act)
        return self.model.vision_head(x, *inputs[self.n_embed:])


class TextGraph(nn.Cell):
    """Embeddings with image tokens merged, the cached decoder over S new tokens, logits at last_idx."""

    def __init__(self, model):
        super().__init__(auto_prefix=False)
        self.model = model

    def construct(self, input_ids, image_feats, image_index, pos, cache_pos, slot_ids, last_idx):
        x = merge_image_features(self.model.embed(input_ids), image_feats, image_index)
        h = self.model.text(x, pos, cache_pos, slot_ids)
        b, s, d = h.shape
        rows = ops.arange(b, dtype=ms.int32) * s + last_idx.astype(ms.int32)
        return self.model.logits(self.model.final_norm(ops.gather(h.reshape(b * s, d), rows, 0)))


def _spec(shape, dtype):
    return Tensor(shape=list(shape), dtype=dtype)


def _export_vit_vision(pipe, out_dir):
    from PIL import Image
    rt = pipe.runtime
    probe, _ = pipe.prepare([Image.new("RGB", (64, 64), (255, 255, 255))], "x")
    item = probe.vision_inputs[0]
    vision = VisionGraph(rt.model, len(item.embed))
    arrays = list(item.embed) + list(item.head)
    # dynamic first dimension of every input (patch count, merged-token count)
    specs = [_spec([None] + list(np.shape(a))[1:], rt.tensor(a).dtype) for a in arrays]
    ms.export(vision, *specs, file_name=os.path.join(out_dir, "vision"), file_format="MINDIR")
    return {"kind": "vit", "inputs": [len(item.embed), len(item.head)]}


def _export_view_vision(pipe, out_dir):
    rt, model = pipe.runtime, pipe.runtime.model
    sizes = [int(s) for s in pipe.processor.view_sizes()]
    view = model.view_step()
    for side in sizes:
        args = [rt.tensor(a) for a in model.view_args(np.zeros((1, 3, side, side), np.float32))]
        ms.export(view, *args, file_name=os.path.join(out_dir, f"vision_{side}"), file_format="MINDIR")
    extra = int(model.vision.extra_rows().shape[0])
    ms.export(model.assemble_step(), _spec([None, model.cfg.text.hidden_size], rt.compute_dtype),
              _spec([None], ms.int32), file_name=os.path.join(out_dir, "assemble"), file_format="MINDIR")
    return {"kind": "views", "sizes": sizes, "extra_rows": extra}


def _vision_kind(pipe):
    """"vit" (one VisionGraph over the layer stack) or "views" (the model's per-view graphs); ExportError else."""
    model = pipe.runtime.model
    if isinstance(model, ViTStackModel):
        return "vit"
    if isinstance(model, ViewsModel):
        return "views"
    raise ExportError(f"{pipe.name}'s vision tower has no export graph yet")


def _moe_layers(model):
    return [layer.mlp for layer in model.text_layers() if layer.moe]


def export_pipeline(pipe, out_dir, slots, batch=1):
    """Write the vision graphs, text.mindir, the host-side files and meta.json for a loaded VLMPipeline."""
    model = pipe.runtime.model
    with K.rebound(model, model.kernels.without_native()):  # an exported graph names no library of this machine
        return _export_pipeline(pipe, out_dir, slots, batch)


def _export_pipeline(pipe, out_dir, slots, batch):
    rt, model = pipe.runtime, pipe.runtime.model
    if model.attention_window is not None:  # its exported text graph would attend to every slot
        raise ExportError("a model with sliding-window attention (Unlimited-OCR) cannot be exported to MindIR yet")
    if slots > rt.max_positions:
        raise ExportError(f"--slots {slots} exceeds the model's max_position_embeddings ({rt.max_positions})")
    kind = _vision_kind(pipe)
    os.makedirs(out_dir, exist_ok=True)
    timings = {}
    t0 = time.perf_counter()
    vision = (_export_vit_vision if kind == "vit" else _export_view_vision)(pipe, out_dir)
    timings["vision_s"] = time.perf_counter() - t0
    # text: cache sized (batch, slots), dynamic S and image-token count
    rt.reset_cache(batch, slots, host_writes=False)  # the graph updates its cache in place
    hidden, axes = model.cfg.text.hidden_size, pipe.num_pos_axes
    specs = [_spec([batch, None], ms.int32), _spec([None, hidden], rt.compute_dtype), _spec([batch, None], ms.int32),
             _spec([axes, batch, None], ms.int32), _spec([batch, None], ms.int32), _spec([slots], ms.int32),
             _spec([batch], ms.int32)]
    moe = _moe_layers(model)
    t0 = time.perf_counter()
    try:
        for cell in moe:
            cell.dense = True
        ms.export(TextGraph(model), *specs, file_name=os.path.join(out_dir, "text"), file_format="MINDIR")
    finally:
        for cell in moe:
            cell.dense = False
    timings["text_s"] = time.perf_counter() - t0
    for name in HOST_FILES:
        src = os.path.join(pipe.model_dir, name)
        if os.path.isfile(src):
            shutil.copy(src, os.path.join(out_dir, name))
    meta = {"format": FORMAT_VERSION, "model": pipe.name, "batch": batch, "slots": slots, "num_pos_axes": axes,
            "hidden_size": hidden, "eos_ids": pipe.eos_ids, "pad_id": rt.pad_id,
            "dtype": str(rt.compute_dtype).lower(), "vision": vision}
    if pipe.processor.mode:
        meta["mode"] = pipe.processor.mode
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return timings


def mindir_file(folder, name):
    """`name`.mindir, or `name`_graph.mindir (+ `name`_variables/) as MindSpore writes graphs whose weights pass
    its single-file size limit (the real-size models)."""
    for candidate in (f"{name}.mindir", f"{name}_graph.mindir"):
        path = os.path.join(folder, candidate)
        if os.path.isfile(path):
            return path
    raise ExportError(f"{folder} has no {name}.mindir (an incomplete export?)")


class _NoCompile:
    """The pipeline reads compile seconds per family; GraphCells compile inside their first call."""
    seconds = {}


class MindIRRuntime(Runtime):
    """The runtime calls of a batch-of-one BatchEngine (VLMPipeline.run) served by the exported graphs through
    nn.GraphCell: one sequence, its KV cache inside the text graph (exported for `slots` positions)."""

    host_cache = False  # the cache lives in the graph: the engine steps its one row
    releases_vision = False
    kv_cache_dtype = "fp32"  # the graphs are exported in fp32, their cache too

    def __init__(self, folder, meta):
        self.meta = meta
        self.slots = meta["slots"]
        self.max_positions = meta["slots"]
        self.pad_id = meta["pad_id"]
        self.compiler = _NoCompile()
        self.vision_meta = meta.get("vision", {"kind": "vit"})
        if self.vision_meta["kind"] == "views":
            self.views = {side: nn.GraphCell(ms.load(mindir_file(folder, f"vision_{side}")))
                          for side in self.vision_meta["sizes"]}
            self.assemble = nn.GraphCell(ms.load(mindir_file(folder, "assemble")))
        else:
            self.vision = nn.GraphCell(ms.load(mindir_file(folder, "vision")))
        self.text = nn.GraphCell(ms.load(mindir_file(folder, "text")))
        self.slot_ids = Tensor(np.arange(self.slots, dtype=np.int32))
        self._dummy = Tensor(np.zeros((1, meta["hidden_size"]), np.float32))

    tensor = staticmethod(host_tensor)  # the graphs are exported in fp32

    def release_after_vision(self, graphs=False, layers=False):
        """Nothing to free: the exported graphs are loaded once and kept."""

    def encode_images(self, vision_inputs):
        if self.vision_meta["kind"] == "views":
            feats = [self.encode_views(item) for item in vision_inputs]
        else:
            feats = [self.vision(*[self.tensor(a) for a in list(item.embed) + list(item.head)])
                     for item in vision_inputs]
        return feats[0] if len(feats) == 1 else ops.concat(feats, 0)

    def encode_views(self, item):
        """Each view (pixels [n, 3, S, S], tables) through its side's graph one tile at a time, then assembled
        by the host's index (item.head[0]) or, without one, as all rows followed by the extra rows."""
        parts = []
        for view in item.embed:
            pixels = np.asarray(view[0])
            graph = self.views.get(pixels.shape[-1])
            if graph is None:
                raise ExportError(f"this export has no vision graph for {pixels.shape[-1]}-px views (exported: "
                                  f"{self.vision_meta['sizes']}); export again with the wanted mode")
            rest = [self.tensor(a) for a in view[1:]]
            parts += [graph(self.tensor(pixels[i:i + 1]), *rest) for i in range(pixels.shape[0])]
        feats = parts[0] if len(parts) == 1 else ops.concat(parts, 0)
        index = item.head[0] if item.head else np.arange(feats.shape[0] + self.vision_meta["extra_rows"])
        return self.assemble(feats, self.tensor(index))

    def encode_batch(self, requests):
        return [self.encode_images(v) if v else None for v in requests]

    def plan_slots(self, prompt_len, max_new_tokens):
        if prompt_len + max_new_tokens > self.slots:
            raise RequestTooLong(f"prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                                 f"exported cache of {self.slots} positions (export again with a larger --slots)")
        return self.slots

    def cache_bytes(self, batch, slots):
        """The exported text graph holds its one cache from load on: nothing more to allocate."""
        return 0

    def reset_cache(self, batch, slots, host_writes=None):
        if batch != 1:
            raise ValueError("a MindIR export serves one sequence at a time")

    def prefill_batch(self, preps, feats, cache_rows, slots):
        if len(preps) != 1:
            raise ValueError("a MindIR export serves one sequence at a time")
        return self.prefill(preps[0], feats[0], 0)

    def decode_batch(self, tokens, cache_pos, rope_delta, num_axes):
        return self.decode(int(tokens[0]), int(cache_pos[0]), int(rope_delta[0]), num_axes)

    def prefill(self, prep, image_feats, max_new_tokens):
        """The prompt into the graph's cache (room left for max_new_tokens): logits of its last token [1, V]."""
        s = prep.input_ids.shape[0]
        self.plan_slots(s, max_new_tokens)
        image_index = np.full((1, s), -1, np.int32)
        mask = prep.image_token_mask.astype(bool)
        image_index[0][mask] = np.arange(int(mask.sum()), dtype=np.int32)
        return self.text(Tensor(prep.input_ids[None].astype(np.int32)),
                         self._dummy if image_feats is None else image_feats, Tensor(image_index),
                         Tensor(prep.position_ids[:, None].astype(np.int32)),
                         Tensor(np.arange(s, dtype=np.int32)[None]), self.slot_ids,
                         Tensor(np.array([s - 1], np.int32)))

    def decode(self, token, cache_pos, rope_delta, num_axes):
        return self.text(Tensor(np.array([[token]], np.int32)), self._dummy, Tensor(np.array([[-1]], np.int32)),
                         Tensor(np.full((num_axes, 1, 1), cache_pos + rope_delta, np.int32)),
                         Tensor(np.array([[cache_pos]], np.int32)), self.slot_ids, Tensor(np.array([0], np.int32)))


def load_mindir(folder, model=None):
    """A VLMPipeline over an exported folder: the model package's processor and output handling, the graphs."""
    from ms_ocr.config_utils import CheckpointError
    from ms_ocr import models
    from ms_ocr.vlm import VLMPipeline
    path = os.path.join(folder, "meta.json")
    if not os.path.isfile(path):
        raise CheckpointError(f"{folder} is not a MindIR export (no meta.json); create one with "
                              "python -m ms_ocr.export")
    with open(path) as f:
        meta = json.load(f)
    if model is not None and models.canonical(model) != models.canonical(meta["model"]):
        raise CheckpointError(f"{folder} holds an export of {meta['model']}, not {model}")
    t0 = time.perf_counter()
    host = models.get(meta["model"]).host_side(folder, meta.get("mode"))
    runtime = MindIRRuntime(folder, meta)
    return VLMPipeline(meta["model"], folder, host["cfg"], host["processor"], runtime, host["vision_inputs"],
                       meta["eos_ids"], meta["num_pos_axes"], host["cfg"].image_token_id,
                       load_seconds=time.perf_counter() - t0, postprocess=host["postprocess"],
                       task_inputs=host["task_inputs"], line_height=host["line_height"])


def export_vision_onnx(pipe, image, path):
    """The vision encoder at one image size (ONNX needs static shapes) -> ONNX (opset of MindSpore's exporter).

    ViT-stack models: the whole tower for this image. DeepEncoder models (DeepSeek-OCR v1/v2): the graph of one
    view side, the image's global view (tiles of the same side use the same file, one per call; the assembly
    with newline / separator rows stays on the host). Built with the portable kernel formulations (no Rsqrt /
    Reciprocal, which MindSpore cannot convert). Returns the input arrays, in the graph's input order, and the
    MindSpore output for them, to check a runtime against."""
    prep, _ = pipe.prepare([image], "x")
    if len(prep.vision_inputs) != 1:
        raise ExportError("expected one image")
    item = prep.vision_inputs[0]
    model = pipe.runtime.model
    vit = _vision_kind(pipe) == "vit"
    arrays = [np.asarray(a) for a in (list(item.embed) + list(item.head) if vit else item.embed[-1])]
    args = [pipe.runtime.tensor(a) for a in arrays]
    with K.rebound(model, model.kernels.for_onnx()):
        graph = VisionGraph(model, len(item.embed)) if vit else model.view_step()
        want = graph(*args).asnumpy()
        ms.export(graph, *args, file_name=os.path.splitext(path)[0], file_format="ONNX")
    return [a.asnumpy() for a in args], want
