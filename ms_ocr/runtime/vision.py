"""Images through a model's vision tower, by its kind (nn/vlm.py): a ViT stack (ViTStackModel) runs its packed layers
block by block through shared layer graphs; a tower of views (ViewsModel: DeepSeek-OCR's DeepEncoders) runs through
the model's own `encode_views`."""

import mindspore as ms
from mindspore import Tensor, ops

from ms_ocr import ops as K
from ms_ocr.nn.functional import rows
from ms_ocr.nn.vlm import ViewsModel
from ms_ocr.runtime.tensors import host_tensor, padded_rows, release_weights
from ms_ocr.steps import VisionEmbedStep, VisionHeadStep, ViTAttentionInNoRopeStep, ViTAttentionInStep, ViTBlockStep, \
    WidenStep

# Query rows per vision block call (attention + out projection + MLP of those rows): scores [H, 512, N]
# instead of [H, N, N] and MLP temporaries that fit the cache.
VISION_ATTENTION_CHUNK = 512
# The same with the products in bf16 on the CPU (--dtype bf16, Plan.bf16_products: oneDNN's bf16 GEMMs, the
# native attention, which keeps no score buffers): oneDNN's products run faster on longer blocks, at the same peak
# RSS (docs/journal/benchmarks.md, "`--dtype bf16` with its bf16 KV cache on an AMX Xeon").
VISION_ATTENTION_CHUNK_BF16 = 1024


class VisionEncoder:
    """The vision side of a runtime. `release_graphs`: free the vision graphs (compiled code and activation
    memory) as soon as a request's images are encoded, so that they and the prefill graphs are never resident
    together (for a request whose image size will not come back: a lower peak). `release_layers`: free each ViT
    layer's weights once it has run (a one-request process: the ViT weights are gone before the vision head's
    activations and the text weights are allocated); with stream_layers each is also read only when it is about
    to run."""

    def __init__(self, model, plan, compiler):
        self.model, self.plan, self.compiler, self.compute_dtype = model, plan, compiler, plan.compute_dtype
        kn = plan.kernels
        self.views = isinstance(model, ViewsModel)
        if not self.views:
            self.embed_step = VisionEmbedStep(model)
            self.head_step = VisionHeadStep(model)
            vspec = model.vision_layers()[0].spec
            in_step = ViTAttentionInStep if vspec["rope"] else ViTAttentionInNoRopeStep
            self.in_step = in_step(kn, vspec["heads"], vspec["eps"])
            self.block_step = ViTBlockStep(kn, vspec["dim"] ** -0.5, vspec["eps"], vspec["act"])
        self.widen_step = WidenStep(kn)
        self.attention_chunk = None  # rows a block (None: by the products' precision, chunk())
        self.release_graphs = False
        self.release_layers = False
        self._cells = {}
        self._load_layer, self._unloaded = None, set()  # stream_layers'

    def stream_layers(self, layers, load):
        """The ViT layers' weights are not loaded (models/loading.py, staged): each layer's are read by
        `load(names)` right before it runs, and read again if release_layers freed them. A one-request process
        then holds one layer's weights with the vision activations instead of the whole tower's."""
        self._load_layer, self._unloaded = load, {id(layer) for layer in layers}

    def _ensure_layer(self, layer):
        if id(layer) in self._unloaded:
            self._load_layer({p.name for p in layer.get_parameters()})
            self._unloaded.discard(id(layer))

    def chunk(self):
        """Query rows per block: attention_chunk where set, else VISION_ATTENTION_CHUNK_BF16 with the products in bf16
        on the CPU, VISION_ATTENTION_CHUNK otherwise (the exact path's blocks are unchanged)."""
        if self.attention_chunk is not None:
            return self.attention_chunk
        return VISION_ATTENTION_CHUNK_BF16 if self.plan.bf16_products else VISION_ATTENTION_CHUNK

    def tensor(self, array):
        return host_tensor(array, self.compute_dtype)

    def call(self, step, *args):
        """Run a vision graph (compiled once per input shapes; freed with the vision group)."""
        return self.compiler.call("vision", step, *args)

    def cells(self, name, build):
        """Step Cells a model's encode_views builds once per runtime: `build()` on first use of `name`."""
        if name not in self._cells:
            self._cells[name] = build()
        return self._cells[name]

    def encode_batch(self, requests):
        """Several requests' VisionInputs lists -> image tokens per request (None where a request has none).

        Every image of every request goes through the ViT layers packed into one row block: the layer graphs
        (norms, projections, MLP) run once over all images; attention runs per image on its exact rows (no
        mask, no cross-image scores). Rows are not padded to buckets: padding plus slicing each image's keys out of
        the padded block made the vision tower slower. A tower of views (DeepSeek-OCR) encodes each request through
        the model's encode_views."""
        if self.views:
            out = [self.model.encode_views(self, v) if v else None for v in requests]
        else:
            feats = iter(self.packed([item for v in requests for item in v]))
            out = []
            for v in requests:
                mine = [next(feats) for _ in v]
                out.append(None if not mine else mine[0] if len(mine) == 1 else ops.concat(mine, 0))
        if self.release_graphs:
            out = [None if f is None else Tensor(f.asnumpy()) for f in out]  # own memory, not a freed graph's
            self.compiler.free_group("vision")
        return out

    def packed(self, items):
        """Images through embed, the packed ViT layers and the per-image vision head: one Tensor per image."""
        if not items:
            return []
        x, spans = self.packed_tower(items)
        return [self.call(self.head_step, x[s:s + n], *[self.tensor(a) for a in item.head])
                for item, (s, n) in zip(items, spans)]

    def packed_tower(self, items):
        """Images' patch embeddings, concatenated, through every ViT layer: ([rows, C] before the model's vision
        head, each image's (start, n) rows).

        An image of n patches runs in ceil(n / chunk()) blocks of equal size, its rows padded by fewer
        rows than there are blocks (zeros: finite through every layer; their keys and values are left out of
        the attention and their outputs are never read). One shape per image for each step, instead of full
        blocks plus a shorter last one: two graphs (and their activation memory) fewer per image size."""
        xs, images, offset, chunk = [], [], 0, self.chunk()
        for item in items:
            out = self.call(self.embed_step, *[self.tensor(a) for a in item.embed])
            x, rope = (out[0], tuple(out[1:])) if isinstance(out, tuple) else (out, ())
            n = x.shape[0]
            count = -(-n // chunk)
            size = -(-n // count)
            pad = count * size - n
            if pad or self.release_graphs:  # own memory: padded, or to outlive the graph freed below
                x = padded_rows(x, pad, 0)
                rope = tuple(padded_rows(r, pad, -2) for r in rope)
            # blocks of query rows, each with its rows of the rope tables ([.., N, D])
            spans = [(s, s + size) for s in range(0, count * size, size)]
            images.append((offset, n, [(offset + s, offset + e, tuple(rows(r, s, e, -2) for r in rope))
                                       for s, e in spans]))
            xs.append(x)
            offset += count * size
        if self.release_graphs:
            # The embedding graph runs once per image, and its activation memory (the [N, 4, C] position taps)
            # would stay resident through every ViT layer: its
            # outputs were copied out above, and the graph is freed now.
            self.compiler.free_cell(self.embed_step)
        x = xs[0] if len(xs) == 1 else ops.concat(xs, 0)
        for layer in self.model.vision_layers():
            self._ensure_layer(layer)
            x = self.layer(layer, x, images)
            if self.release_layers:
                release_weights(layer.get_parameters())
                if self._load_layer is not None:
                    self._unloaded.add(id(layer))
        return x, [(start, n) for start, n, _ in images]

    def tower(self, item):
        """One image's patch embeddings through every ViT layer: [N, C] (before the model's vision head)."""
        x, [(start, n)] = self.packed_tower([item])
        return rows(x, start, start + n, 0)

    def widened(self, weights):
        """weights with the bf16 ones widened to fp32 in one graph call, except those K.keeps_bf16 keeps."""
        keep = [K.keeps_bf16(self.plan.kernels, w) for w in weights]
        if all(keep):
            return tuple(weights)
        wide = self.call(self.widen_step, *[w for w, k in zip(weights, keep) if not k])
        wide = iter(wide if isinstance(wide, (tuple, list)) else (wide,))
        return tuple(w if k else next(wide) for w, k in zip(weights, keep))

    def layer(self, layer, x, images):
        """One ViT layer over packed rows; images: per image (first row, patches, its blocks of rows (start, end,
        rope rows)).

        Every step runs per block of rows, one graph call each: norm + q/k/v + rope, then (once the image's
        keys and values are gathered) the block's attention over them, out projection and MLP. A block's
        activations stay small (at 512 rows the MLP's [rows, 4C] temporaries fit the CPU's cache) and no
        attention output is concatenated. Against attention chunks between whole-image norm/projection and MLP
        graphs this is faster and holds less memory, with bit-identical features."""
        in_weights, out_weights = layer.weights(layer.attn_in_names), layer.weights(layer.out_names)
        if self.compute_dtype == ms.float32 and any(w.dtype == ms.bfloat16 for w in in_weights + out_weights):
            # bf16-resident weights (Plan.bf16_weights): widened once for all of this layer's blocks, but for
            # the matrices where products are computed in bf16 (K.keeps_bf16: they are read as they are)
            in_weights, out_weights = (self.widened(ws) for ws in (in_weights, out_weights))
        parts = []
        for _, n, blocks in images:
            qkv = [self.call(self.in_step, rows(x, s, e, 0), *rope, *in_weights) for s, e, rope in blocks]
            # the keys and values of the image's rows (not of its padding rows), contiguous: a sliced view as a
            # graph input made the blocks' attention slower
            last = n - blocks[-1][0] + blocks[0][0]  # real rows of the last block
            k, v = ([t[i] for t in qkv[:-1]] + [rows(qkv[-1][i], 0, last, -2)] for i in (1, 2))
            k, v = (k[0] if len(k) == 1 else ops.concat(k, 2)), (v[0] if len(v) == 1 else ops.concat(v, 2))
            parts += [self.call(self.block_step, q, k, v, rows(x, s, e, 0), *out_weights)
                      for (s, e, _), (q, _, _) in zip(blocks, qkv)]
        return parts[0] if len(parts) == 1 else ops.concat(parts, 0)
