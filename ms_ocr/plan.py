"""The precision plan of a loaded model: one frozen `Plan` made once (`make_plan`) from the device target, the
checkpoint (its tensors' dtypes, its decoder) and the options (--dtype, --quantize, --kv-cache-dtype), and passed to
the loader (what is stored in which dtype, what is quantised as it is read), the runtime (the KV caches, the vision
blocks) and, through its kernels, to the model's Cells and the step Cells (ops/kernels.py). The policy behind each
field: docs/precision.md.

The option choices below import no framework: the command lines read them for --help."""

import sys
from dataclasses import dataclass

DTYPES = ("auto", "fp32", "bf16", "fp16")  # --dtype
QUANTIZE = ("none", "int8", "int8-g64", "int8-g32")  # --quantize
KV_CACHE_DTYPES = ("auto", "fp32", "bf16")  # --kv-cache-dtype
INT8_GROUPS = {"int8": 0, "int8-g64": 64, "int8-g32": 32}  # columns per scale (0: one scale per row)


@dataclass(frozen=True)
class Plan:
    """How a loaded model computes and stores its numbers."""

    target: str  # "CPU" or "Ascend"
    kernels: object  # ops.Kernels: which kernel serves each op
    compute_dtype: object  # the graphs' float dtype (fp32 on the CPU)
    round_to: str = None  # "bf16" / "fp16": weights rounded to it at load (the CPU's --dtype bf16|fp16), or None
    bf16_weights: bool = False  # a bf16 checkpoint's weights the model names stay bf16 in memory (exact)
    bf16_products: bool = False  # products in bf16 (--dtype bf16 where the CPU has bf16 dot products)
    kv_dtype: object = None  # the decoder's KV caches'
    quantize: str = "none"  # QUANTIZE: the decoder's matrices (and head) weight-only int8

    @property
    def kv_cache_name(self):
        """The KV caches' dtype as --kv-cache-dtype names it: fp32 or bf16 (fp16 where an NPU computes in fp16)."""
        import mindspore as ms
        return {ms.float32: "fp32", ms.bfloat16: "bf16", ms.float16: "fp16"}.get(self.kv_dtype, str(self.kv_dtype))

    @property
    def int8_group(self):
        """Columns per int8 scale (0: one per row), or None without --quantize."""
        return INT8_GROUPS.get(self.quantize)

    @property
    def host_cache(self):
        """The KV caches are written by the host (off Ascend: runtime/kvcache.py HostKVCache)."""
        return not self.kernels.fused

    def bf16_names(self, net):
        """The Parameters of `net` stored in bf16 (the loader's keep_bf16): the model's bf16_weight_names where the
        weights stay bf16, and with products in bf16 its bf16_product_weight_names too."""
        if not self.bf16_weights:
            return set()
        names = net.bf16_weight_names()
        return names | net.bf16_product_weight_names() if self.bf16_products else names

    def key(self):
        """What of the plan shapes a model's graphs (the compile cache's key)."""
        kn = self.kernels
        return {"target": self.target, "compute_dtype": str(self.compute_dtype), "round_to": self.round_to,
                "fused": kn.fused, "routes": sorted(kn.routes), "native": kn.library.isa_level if kn.library else None,
                "bf16_natives": [kn.gather_rows is not None, kn.widen is not None], "quantize": self.quantize,
                "kv_dtype": str(self.kv_dtype)}


def resolve_dtype(dtype, target, checkpoint_tags):
    """(compute dtype, rounding of weights: "bf16" | "fp16" | None) for the requested --dtype.

    CPU computes in fp32 (MindSpore has no fast CPU bf16/fp16 kernels): bf16 means bf16-rounded weights
    with fp32 compute. Ascend computes in the requested half precision; auto follows the checkpoint.
    """
    import mindspore as ms
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (auto, fp32, bf16 or fp16)")
    if target != "Ascend":
        return ms.float32, (dtype if dtype in ("bf16", "fp16") else None)
    if dtype == "auto":
        dtype = "bf16" if "BF16" in checkpoint_tags else ("fp16" if "F16" in checkpoint_tags else "fp32")
    return {"fp32": ms.float32, "bf16": ms.bfloat16, "fp16": ms.float16}[dtype], None


def bf16_resident(dtype, target, checkpoint_tags, kernels):
    """Whether the text weights a model names (VLMCell.bf16_weight_names) stay bf16 in memory: on the CPU, for
    --dtype bf16 or auto on a checkpoint holding bf16 tensors, where the native decode kernels (which read bf16
    weights and widen them in registers) are routed. Widening bf16 to fp32 is exact, so this computes bit for
    bit what the fp32 path computes on the same checkpoint, reading half the bytes per decode step. --dtype fp32
    keeps every weight fp32 (the A/B); Ascend computes in bf16 already."""
    if target == "Ascend" or dtype not in ("auto", "bf16"):
        return False
    if dtype == "auto" and "BF16" not in checkpoint_tags:
        return False
    return (kernels.decode_layer is not None and kernels.matmul_t is not None and kernels.gather_rows is not None
            and kernels.widen is not None)


_NOTICES = set()  # the reasons already printed: each said once per process


def bf16_products(dtype, target, kernels):
    """`kernels` with products in bf16 for --dtype `dtype` on `target`, or None where they stay as they are: on the
    CPU --dtype bf16 computes the matrices of vision and prefill in bf16 where the CPU has bf16 dot products
    (ops.kernels.with_bf16_products: rounded activations, fp32 accumulation; norms, softmax, rope, residuals and a
    lone sequence's decode products stay fp32); elsewhere it keeps the exact path on bf16-rounded weights and says
    so once on stderr. On Ascend, bf16 is the device's own compute dtype (resolve_dtype)."""
    from ms_ocr.ops import kernels as routes
    if dtype != "bf16":
        return None
    if target == "Ascend":
        return kernels
    reason = routes.bf16_products_refused(target, kernels)
    if reason is None:
        return routes.with_bf16_products(kernels)
    if reason not in _NOTICES:
        _NOTICES.add(reason)
        print(f"[ms_ocr] --dtype bf16: products stay fp32 on bf16-rounded weights ({reason})", file=sys.stderr)
    return None


def resolve_kv_dtype(kv_cache_dtype, compute_dtype, auto_bf16):
    """The KV caches' dtype for --kv-cache-dtype: fp32 or bf16 as asked; auto is bf16 where `auto_bf16` (--dtype
    bf16 computes in bf16, or --quantize int8, and the native decode layer reads the cache; torch's bf16 autocast
    and llama.cpp's default f16 cache, beside its Q8_0 weights too, hold K/V in 16 bits) and the compute dtype
    otherwise (fp32 on the CPU: the exact path).
    A bf16 cache halves the bytes a decode step reads per cached position and the cache's memory; the new token's
    k and v are rounded to bf16 as they are stored, and attention widens them again (fp32 sums)."""
    import mindspore as ms
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"unknown --kv-cache-dtype {kv_cache_dtype!r} ({', '.join(KV_CACHE_DTYPES)})")
    if kv_cache_dtype == "auto":
        return ms.bfloat16 if auto_bf16 else compute_dtype
    return {"fp32": ms.float32, "bf16": ms.bfloat16}[kv_cache_dtype]


def make_plan(target, net, model_dir, dtype="auto", quantize="none", kv_cache_dtype="auto", native_layers=None):
    """The plan of model Cell `net` (built, not loaded) on `target` for the checkpoint in `model_dir` (its tensors'
    dtypes) under the given options. Called before any graph of the model is built: --dtype bf16's kernels are chosen
    here. native_layers(net, kernels, compute_dtype): whether the runtime's decode step runs every decoder layer,
    a MoE layer's attention included, through the native DecodeLayer (runtime/host_step.py's model_refusal, given
    by the loader; None: not known, so for a MoE decoder, no)."""
    import mindspore as ms

    from ms_ocr.convert.safetensors_io import checkpoint_dtypes
    from ms_ocr.ops import kernels as routes
    if quantize not in QUANTIZE:
        raise ValueError(f"unknown --quantize {quantize!r} ({', '.join(QUANTIZE)})")
    if quantize != "none" and target == "Ascend":
        raise ValueError("--quantize int8 is CPU-only for now (on Ascend it would be MindSpore Golden Stick's "
                         "weight-only quantisation with the NPU's quantised matmul, not run on an NPU yet)")
    checkpoint_tags = checkpoint_dtypes(model_dir)
    compute_dtype, round_to = resolve_dtype(dtype, target, checkpoint_tags)
    kernels = routes.choose(target)
    if quantize != "none" and kernels.q8 is None:
        # the composed route widens every matrix to fp32 in each step's graph: DeepSeek-OCR-2 held 18.7 GB and took
        # 458 ms a token (5.7 GB and ~42 ms with the kernels; Xeon model 167)
        raise ValueError(f"--quantize {quantize} needs ms_ocr's native CPU kernels, which are not loaded here "
                         "(MS_OCR_NATIVE=0, or no C++ compiler when ms_ocr was installed): without them each step "
                         "widens the weights to fp32, more memory than no --quantize")
    # on Ascend nothing stays bf16 beside the compute dtype, which is the precision there
    resident = bf16_resident(dtype, target, checkpoint_tags, kernels) and bool(net.bf16_weight_names())
    with_products = bf16_products(dtype, target, kernels) if resident else None
    products = with_products is not None
    # auto: a bf16 cache under a reduced precision the user chose (bf16 products, int8 weights) where the native
    # DecodeLayer reads it: a dense decoder's layers, and a MoE decoder's where the host step runs them (their
    # attention in the graph is the composed ops.attention_with_new, whose widening of the whole cache each step
    # would cost more than its reads save)
    kernels = with_products if products else kernels
    dense = not any(layer.moe for layer in net.text_layers())
    reads_bf16 = dense or (native_layers is not None and native_layers(net, kernels, compute_dtype))
    kv_dtype = resolve_kv_dtype(kv_cache_dtype, compute_dtype, (products or quantize != "none") and reads_bf16)
    if kv_dtype == ms.bfloat16 and compute_dtype == ms.float32 and not reads_bf16:
        print("[ms_ocr] --kv-cache-dtype bf16: this MoE decoder's attention widens the cache to fp32 every step "
              "(half the cache's memory, a slower decode)", file=sys.stderr)
    return Plan(target, kernels, compute_dtype, round_to, resident, products, kv_dtype, quantize)
