"""The interfaces the parts of ms_ocr meet at, stated as Protocols: what a VLM's model Cell provides (and each kind of
vision tower), what a runtime provides the engine (the live one over the model, and the one over exported MindIR
files), and what a processor provides. Code depends on these members only; which kind a model or processor is, is
its class (ms_ocr/nn/vlm.py ViTStackModel / ViewsModel, processing/vlm_processor.py VLMProcessor), never a probe
for an attribute. tests/test_interfaces.py checks that every implementation has every member. No framework here:
the annotations name what the members hold."""

from typing import Protocol


class VLMModel(Protocol):
    """A VLM's model Cell (ms_ocr/nn/vlm.py VLMCell) as the runtime and the step Cells drive it. Cells compute with
    the kernels bound to them (`kernels`, ops/kernels.py bind)."""

    cfg: object  # the model's config (config.py): `text` is the decoder's
    tied: bool  # the head is the embedding table
    num_kv_heads: int
    attention_window: object  # None, or the decoder's reference sliding window W (runtime/window.py)
    kernels: object  # ops.Kernels, bound by the loader

    def text_layers(self) -> list:
        """The decoder layers (nn.blocks.DecoderLayer): weights, `spec`, `moe`, the KV-cache Parameters."""

    def vision_layers(self) -> list:
        """The ViT layers the runtime runs layer by layer (nn.blocks.ViTLayer); empty for a tower of views."""

    def embed(self, input_ids):
        """Token ids [B, S] -> embeddings [B, S, H]."""

    def text_rotary(self, pos):
        """Rope positions [A, B, S] -> (cos, sin) of the decoder."""

    def text(self, x, pos, cache_pos, slot_ids):
        """The decoder over S new tokens per sequence, writing their k/v into caches laid out for the graph
        (runtime/kvcache.py GraphKVCache) -> hidden states [B, S, H]."""

    def text_read_only(self, x, pos, cache_pos, slot_ids, caches=None):
        """One new token per sequence over caches the host writes (HostKVCache; `caches`: views of the first B rows,
        or None for the cache Parameters) -> (hidden [B, 1, H], every layer's k and v [L, B, Hkv, 1, D])."""

    def text_read_only_inputs(self, pos, cache_pos, slot_ids):
        """(cos, sin, mask) of a text_read_only step (the host-routed MoE's layer graphs take them)."""

    def final_norm(self, h):
        """The decoder's final norm."""

    def logits(self, h):
        """Hidden rows [N, H] -> logits [N, V]."""

    def allocate_cache(self, batch, slots, dtype, flat=True):
        """(Re)size every layer's KV caches, zeroed: `flat` the in-graph layout, else the host-written one."""

    def bf16_weight_names(self) -> set:
        """The Parameters a bf16 checkpoint keeps in bf16 on the CPU (Plan.bf16_weights)."""

    def bf16_product_weight_names(self) -> set:
        """The matrices kept in bf16 besides when products run in bf16 (Plan.bf16_products)."""


class ViTStackTower(Protocol):
    """A vision tower that is a stack of ViT layers (nn.vlm.ViTStackModel: PaddleOCR-VL, HunyuanOCR): one image per
    call, its patch embeddings through the layers (run by runtime/vision.py block by block), then its head."""

    def vision_embed(self, *inputs):
        """An image's VisionInputs.embed arrays -> patch embeddings [N, C], or (x, cos, sin) with a vision rope."""

    def vision_layers(self) -> list:
        """The ViTLayers (names and weights in F.VIT_*_ROLES order, `spec`)."""

    def vision_head(self, x, *inputs):
        """The layers' output [N, C] and VisionInputs.head arrays -> the image's tokens [M, text hidden]."""


class ViewsTower(Protocol):
    """A vision tower over views of an image (nn.vlm.ViewsModel: DeepSeek-OCR's DeepEncoders): the model runs its
    views itself, and exports one graph per view size and one that assembles them."""

    def encode_views(self, encoder, vision_inputs):
        """Images' VisionInputs through the tower with the runtime's VisionEncoder (its graph calls) -> tokens."""

    def view_step(self):
        """A Cell: one view size's pixels and tables -> its tokens (MindIR export)."""

    def assemble_step(self):
        """A Cell: an image's view tokens and the host's index -> its tokens in order (MindIR export)."""

    def view_args(self, pixels):
        """The graph inputs of one view size for pixels [n, 3, S, S]."""


class Runtime(Protocol):
    """What the engine (ms_ocr/engine.py) and the pipeline (vlm.py) drive: runtime/core.py VLMRuntime over a loaded
    model, export/mindir.py MindIRRuntime over exported graphs."""

    compiler: object  # compiler.CompileTimer or the like: `seconds` of compiling per graph family
    max_positions: int
    pad_id: int
    host_cache: bool  # the host writes the KV caches: a step may compute fewer rows than the cache holds
    releases_vision: bool  # nothing of the vision side is needed again (a one-request process)
    kv_cache_dtype: str  # the KV cache's dtype as --kv-cache-dtype names it (fp32, bf16)

    def tensor(self, array):
        """A host array as a graph input."""

    def release_after_vision(self, graphs=False, layers=False):
        """Free the vision graphs once a request's images are encoded, and ViT layers' weights once run."""

    def encode_images(self, vision_inputs):
        """One request's per-image VisionInputs -> its image tokens [M, H]."""

    def encode_batch(self, requests):
        """Several requests' VisionInputs lists -> image tokens per request (None where a request has none)."""

    def plan_slots(self, prompt_len, max_new_tokens) -> int:
        """Cache positions a sequence needs; RequestTooLong past the model's (or the export's) limit."""

    def cache_bytes(self, batch, slots) -> int:
        """Memory caches for `batch` sequences of `slots` positions still need."""

    def reset_cache(self, batch, slots, host_writes=None):
        """Caches for `batch` sequences of `slots` positions, zeroed."""

    def prefill(self, prep, image_feats, max_new_tokens):
        """One prompt into a fresh one-sequence cache -> logits of its last token [1, V]."""

    def prefill_batch(self, preps, feats, cache_rows, slots):
        """Prompts into sequence rows `cache_rows` of the current cache -> each one's last logits [B, V]."""

    def decode(self, token, cache_pos, rope_delta, num_axes):
        """One token of a one-sequence cache -> logits [1, V]."""

    def decode_batch(self, tokens, cache_pos, rope_delta, num_axes):
        """One token for each of the first B sequence rows -> logits [B, V]."""


class HostCacheRuntime(Runtime, Protocol):
    """A runtime whose caches the host writes (host_cache): the engine keeps its running sequences in the first
    rows."""

    def move_cache_row(self, src, dst):
        """Copy sequence row `src` of the caches to row `dst`."""


class Tokenizer(Protocol):
    """processing/tokenizer.py Tokenizer."""

    def encode(self, text, add_special_tokens=True) -> list:
        """Text -> token ids."""

    def decode(self, ids, skip_special_tokens=True) -> str:
        """Token ids -> text."""

    def id_to_token(self, token_id) -> str:
        """A token's piece (e.g. "<0x41>" for a byte-fallback token), or None."""


class Processor(Protocol):
    """A model's host-side processor (models/<model_type>/processor.py): images and a prompt -> the graphs' inputs.
    A processor with a chat template and pixel bounds is a processing/vlm_processor.py VLMProcessor (`settings`,
    `messages`); the others render their prompt themselves."""

    tokenizer: Tokenizer
    mode: str  # the resolution mode (ModelSpec.modes), or None for a model without modes

    def __call__(self, images, prompt) -> dict:
        """-> input_ids, position_ids, rope_delta and the arrays of the model's host.vision_inputs."""

    def decode(self, ids, skip_special_tokens=True) -> str:
        """Generated ids -> text."""
