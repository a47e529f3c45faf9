"""The DeepEncoder of DeepSeek-OCR (v1) and Unlimited-OCR (the same tower): SAM ViT-B (1024 output channels) whose output tokens are CLIP-L's patch
embeddings; CLIP (class token, position table resampled bicubic + antialias, pre-LN, quick_gelu, no final
LN) and SAM tokens concatenated to 2048, a linear projector to the text width; assembly with an
`image_newline` after every row, local tiles (stitched into one raster) before the global view, one
`view_seperator` at the end. Written from the official deepencoder's documented behaviour; checked against
golden numbers of the official code (tests/data/deepseek_ocr_v1). Also the model Cell both build on
(DeepEncoderV1Model) and the host side of one view (view_args, view_items)."""

import numpy as np
from mindspore import Tensor, nn, ops

from ms_ocr import ops as K
from ms_ocr.nn import LayerNorm, Linear, zeros_param
from ms_ocr.nn import functional as F
from ms_ocr.nn.deepencoder import DeepEncoderModel, Projector
from ms_ocr.nn.sam import SamEncoder, sam_tables
from ms_ocr.processing.resample import bicubic_aa_matrix

_bmm = ops.BatchMatMul()


class ClipAttention(nn.Cell):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv_proj = Linear(dim, 3 * dim)
        self.out_proj = Linear(dim, dim)

    def construct(self, x):
        b, s, c = x.shape
        d = c // self.heads
        qkv = self.qkv_proj(x).reshape(b, s, 3, self.heads, d)
        q, k, v = ops.split(qkv, 1, 2)
        q = q.reshape(b, s, self.heads, d).transpose(0, 2, 1, 3)
        k = k.reshape(b, s, self.heads, d).transpose(0, 2, 1, 3)
        v = v.reshape(b, s, self.heads, d).transpose(0, 2, 1, 3)
        return self.out_proj(F.merge_heads(K.attention(self.kernels, q, k, v, None, d ** -0.5, bf16_ok=True)))


class ClipMLP(nn.Cell):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = Linear(dim, hidden)
        self.fc2 = Linear(hidden, dim)

    def construct(self, x):
        return self.fc2(K.quick_gelu(self.kernels, self.fc1(x)))


class ClipLayer(nn.Cell):
    def __init__(self, dim, heads, ffn, eps):
        super().__init__()
        self.layer_norm1 = LayerNorm(dim, eps)
        self.self_attn = ClipAttention(dim, heads)
        self.layer_norm2 = LayerNorm(dim, eps)
        self.mlp = ClipMLP(dim, ffn)

    def construct(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class _Transformer(nn.Cell):
    def __init__(self, dim, heads, ffn, layers, eps):
        super().__init__()
        self.layers = nn.CellList([ClipLayer(dim, heads, ffn, eps) for _ in range(layers)])


class _Table(nn.Cell):
    def __init__(self, rows, dim):
        super().__init__()
        self.weight = zeros_param((rows, dim))


class _Embeddings(nn.Cell):
    def __init__(self, dim, positions):
        super().__init__()
        self.class_embedding = zeros_param((dim,))
        self.position_embedding = _Table(positions, dim)


class ClipEncoder(nn.Cell):
    """`vision_model.*` (its own patch conv is in the checkpoint but unused: dropped on load)."""

    def __init__(self, dim=1024, heads=16, ffn=4096, layers=24, image_size=224, patch=14, eps=1e-5):
        super().__init__()
        self.grid = image_size // patch
        self.embeddings = _Embeddings(dim, self.grid * self.grid + 1)
        self.pre_layrnorm = LayerNorm(dim, eps)
        self.transformer = _Transformer(dim, heads, ffn, layers, eps)

    def construct(self, tokens, pos_m):
        """tokens [n, g*g, C] (SAM output, row-major) -> [n, 1 + g*g, C]; pos_m [g, grid] resampling matrix."""
        n, p, c = tokens.shape
        g = pos_m.shape[0]
        table = self.embeddings.position_embedding.weight
        grid = table[1:].reshape(self.grid, -1)
        pos = ops.matmul(pos_m, grid).reshape(g, self.grid, c)
        pos = _bmm(ops.broadcast_to(pos_m[None], (g, g, self.grid)), pos).reshape(g * g, c)
        pos = ops.concat((table[:1], pos), 0)
        cls = ops.broadcast_to(self.embeddings.class_embedding.reshape(1, 1, c), (n, 1, c))
        x = ops.concat((cls.astype(tokens.dtype), tokens), 1) + pos[None]
        x = self.pre_layrnorm(x)
        for layer in self.transformer.layers:
            x = layer(x)
        return x


class DeepEncoderV1(nn.Cell):
    """Local `vision.{sam_model, vision_model, projector, image_newline, view_seperator}` (hub: `model.*`)."""

    def __init__(self, sam_cfg, clip_cfg, text_hidden):
        super().__init__()
        self.sam_model = SamEncoder(**sam_cfg)
        self.vision_model = ClipEncoder(**clip_cfg)
        width = sam_cfg["downsample"][1] + clip_cfg["dim"]
        self.projector = Projector(width, text_hidden)
        self.image_newline = zeros_param((text_hidden,))
        self.view_seperator = zeros_param((text_hidden,))

    def extra_rows(self):
        """Rows an image's assembly index points at besides its view tokens: [image_newline, view_seperator]."""
        return ops.stack((self.image_newline, self.view_seperator))

    def construct(self, pixels, pos_m, win_resize, win_index, glob_resize, glob_index, clip_pos_m):
        """One view size in one graph: pixels [n, 3, S, S] -> projected tokens [n, g, g, text_hidden]."""
        return self.post(self.sam_model(pixels, pos_m, win_resize, win_index, glob_resize, glob_index), clip_pos_m)

    def post(self, sam, clip_pos_m):
        """SAM output [n, g, g, 1024] -> CLIP -> concat -> projector: [n, g, g, text_hidden] (no newlines yet)."""
        n, g, _, c = sam.shape
        tokens = sam.reshape(n, g * g, c)
        clip = self.vision_model(tokens, clip_pos_m)
        feats = ops.concat((clip[:, 1:], tokens), -1)
        return self.projector.layers(feats).reshape(n, g, g, -1)


def assembly_index(tiles_grid, tile_g, global_g):
    """Row order of the assembled image tokens as indices into
    concat(tile tokens [P*t*t] (row-major per tile), global tokens [G*G], newline, view_seperator).

    tiles_grid (w_t, h_t) or None; tile_g / global_g: token grid sides."""
    rows = []
    offset = 0
    n_tiles = 0 if tiles_grid is None else tiles_grid[0] * tiles_grid[1]
    total = n_tiles * tile_g * tile_g + global_g * global_g
    newline, sep = total, total + 1
    if tiles_grid is not None:
        w_t, h_t = tiles_grid
        # tile k = (row k // w_t, col k % w_t); raster row y = ty * t + iy, column x = tx * t + ix
        for ty in range(h_t):
            for iy in range(tile_g):
                for tx in range(w_t):
                    k = ty * w_t + tx
                    base = k * tile_g * tile_g + iy * tile_g
                    rows.extend(range(base, base + tile_g))
                rows.append(newline)
        offset = n_tiles * tile_g * tile_g
    for y in range(global_g):
        rows.extend(range(offset + y * global_g, offset + (y + 1) * global_g))
        rows.append(newline)
    rows.append(sep)
    return np.asarray(rows, np.int32)


def view_args(cfg, pixels):
    """One view size's graph inputs: pixels [n, 3, S, S], SAM's tables, CLIP's position resampling matrix."""
    s = cfg.sam
    g = pixels.shape[-1] // s["patch"]
    tables = sam_tables(g, s["image_size"] // s["patch"], s["window"]).arrays()
    out_g = -(-pixels.shape[-1] // (s["patch"] * 4))
    return (pixels, *tables, bicubic_aa_matrix(cfg.clip["image_size"] // cfg.clip["patch"], out_g))


def view_items(cfg, processed):
    """Per image of the processor's output: (its views' graph inputs, tiles first, (its assembly index,))."""
    out = []
    for tiles, grid, glob in processed["views"]:
        views = ([view_args(cfg, tiles)] if tiles is not None else []) + [view_args(cfg, glob)]
        tile_g = -(-tiles.shape[-1] // (cfg.sam["patch"] * 4)) if tiles is not None else 0
        glob_g = -(-glob.shape[-1] // (cfg.sam["patch"] * 4))
        out.append((views, (assembly_index(grid if tiles is not None else None, tile_g, glob_g),)))
    return out


class _PostStep(nn.Cell):
    """CLIP + concat + projector for one view size, one graph."""

    def __init__(self, vision):
        super().__init__(auto_prefix=False)
        self.vision = vision

    def construct(self, sam_out, clip_pos_m):
        return self.vision.post(sam_out, clip_pos_m)


class DeepEncoderV1Model(DeepEncoderModel):
    """A DeepEncoder-v1 VLM as one Cell: `vision` (hub `model.sam_model`, `model.vision_model`, `model.projector`,
    `model.image_newline`, `model.view_seperator`), `model` (the MoE decoder) and `lm_head`."""

    host_view_args = staticmethod(view_args)
    post_step, steps_name = _PostStep, "deepencoder_v1_steps"

    def __init__(self, cfg):
        super().__init__(cfg, DeepEncoderV1(cfg.sam, cfg.clip, cfg.text.hidden_size))

    def assemble(self, item, views):
        """The rows in assembly order (item.head = the assembly index) from [tiles, global, newline, sep]."""
        parts = [y.reshape(-1, y.shape[-1]) for y in views]
        parts.append(self.vision.extra_rows().astype(parts[0].dtype))
        return ops.gather(ops.concat(parts, 0), Tensor(item.head[0]), 0)
