"""HunyuanOCR host preprocessing (reference: transformers HunYuanVLImageProcessorPil + HunYuanVLProcessor).

Images: RGB, smart_resize to multiples of 32 (patch 16 x merge 2) with PIL bicubic whatever the file's
`resample` says (the reference ignores it), rescale, CLIP normalise, patchify in raster order to
[N, 3*16*16]. Text: the checkpoint's chat template (user content, then `<｜hy_User｜>`), each image
placeholder expanded to H*(W+1)+2 copies (merged grid H x W, a newline column per row, begin/end), then
tokenised without extra special tokens. XD-RoPE position ids (4 rows) as the reference's get_rope_index.
"""

import numpy as np
from PIL import Image

from ms_ocr.processing.chat import load_chat_template
from ms_ocr.processing.settings import read_image_settings
from ms_ocr.processing.tokenizer import Tokenizer
from ms_ocr.processing.vlm_processor import VLMProcessor, check_patch_settings

# Class defaults of HunYuanVLImageProcessorPil, used where the preprocessor file omits a key.
IMAGE_DEFAULTS = dict(do_resize=True, resample=3, size={"shortest_edge": 512 * 512, "longest_edge": 2048 * 2048},
                      do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                      image_mean=[0.48145466, 0.4578275, 0.40821073], image_std=[0.26862954, 0.26130258, 0.27577711],
                      patch_size=16, temporal_patch_size=1, merge_size=2)


def patchify(pixels, patch, temporal_patch):
    """[C, H, W] float32 -> [gh*gw, C*t*p*p] in raster patch order (the temporal copies broadcast), gh, gw."""
    channels, height, width = pixels.shape
    gh, gw = height // patch, width // patch
    patches = pixels.reshape(channels, gh, patch, gw, patch).transpose(1, 3, 0, 2, 4)  # [gh, gw, C, p, p]
    patches = np.broadcast_to(patches[:, :, :, None], (gh, gw, channels, temporal_patch, patch, patch))
    return patches.reshape(gh * gw, channels * temporal_patch * patch * patch), gh, gw


def image_token_count(grid, merge):
    _, gh, gw = grid
    return (gh // merge) * (gw // merge + 1) + 2


def xdrope_positions(token_types, grids, merge, num_axes):
    """Rope position ids [num_axes, S] and the decode delta, as HunYuanVLModel.get_rope_index (one sequence).

    Every axis counts 0..S-1; inside each image span (begin + grid + end) the grid tokens get (width,
    height, image index) on the last three axes: width 0..W (the newline column is W), height = row.
    """
    token_types = np.asarray(token_types)
    s = token_types.shape[0]
    pos = np.tile(np.arange(s, dtype=np.int64), (num_axes, 1))
    spans, start = [], None
    for i, t in enumerate(list(token_types) + [0]):
        if t == 1 and start is None:
            start = i
        elif t != 1 and start is not None:
            spans.append((start, i))
            start = None
    if len(spans) != len(grids):
        raise ValueError(f"{len(spans)} image token span(s) for {len(grids)} image(s)")
    offset = num_axes - 3
    for index, ((begin, end), grid) in enumerate(zip(spans, grids)):
        h, w = int(grid[1]) // merge, int(grid[2]) // merge
        rows, cols = np.meshgrid(np.arange(h), np.arange(w + 1), indexing="ij")
        n = h * (w + 1)
        if end - begin == n + 2:
            first = begin + 1
        elif end - begin == n:
            first = begin
        else:
            raise ValueError(f"image span of {end - begin} tokens does not match grid {tuple(grid)}")
        pos[offset, first:first + n] = cols.ravel()
        pos[offset + 1, first:first + n] = rows.ravel()
        pos[offset + 2, first:first + n] = index
    return pos, int(pos.max()) + 1 - s if s else 0


class HunyuanOCRProcessor(VLMProcessor):
    """Images + prompt -> model inputs (NumPy) for HunyuanOCR."""

    def __init__(self, tokenizer, chat_template, settings, image_token_id, num_axes, system_prompt=None):
        super().__init__(tokenizer, chat_template, settings, image_token_id)
        self.num_axes = num_axes
        self.system_prompt = system_prompt

    @classmethod
    def from_pretrained(cls, model_dir, cfg):
        """Tokenizer, chat template and image settings of `model_dir`, checked against `cfg` (HunyuanOCRConfig).

        An empty system message (the template adds `<｜hy_place▁holder▁no▁3｜>` after BOS) comes first for the
        hub's original (v1.0) file, as Tencent's 1.0 vLLM script sends it, and for HunyuanOCR-1.5, as every 1.5
        client of Tencent's sends it (inference/vLLM/infer_vllm_client.py, inference/transformers/infer_hf_8gpu.py
        at commit c55965d3); a transformers save of 1.0 without one, as Tencent's 1.0 transformers script
        (Hunyuan-OCR-master/Hunyuan-OCR-hf/run_hy_ocr.py).
        """
        from ms_ocr.models.hunyuan_vl.version import recognise
        settings = read_image_settings(model_dir, IMAGE_DEFAULTS)
        check_patch_settings(settings, cfg.vision)
        system = cfg.flat_layout or recognise(model_dir) == "1.5"
        return cls(Tokenizer.from_dir(model_dir), load_chat_template(model_dir), settings, cfg.image_token_id,
                   len(cfg.text.xdrope_section), system_prompt="" if system else None)

    def resample(self):
        # Always bicubic: the reference ignores the file's `resample` (PIL's default for RGB).
        return Image.Resampling.BICUBIC

    def patchify(self, pixels):
        """-> [n, 3*t*p*p] patches."""
        return patchify(pixels, self.settings.patch_size, self.settings.temporal_patch_size)

    def empty_patches(self):
        return np.zeros((0, 3 * self.settings.temporal_patch_size * self.settings.patch_size ** 2), np.float32)

    def image_token_count(self, grid):
        return image_token_count(grid, self.settings.merge_size)

    def positions(self, token_types, grids):
        return xdrope_positions(token_types, grids, self.settings.merge_size, self.num_axes)

    def messages(self, prompt, num_images):
        msgs = super().messages(prompt, num_images)
        if self.system_prompt is not None:
            msgs.insert(0, {"role": "system", "content": self.system_prompt})
        return msgs

    def add_special_tokens(self, text):
        return False  # HunYuanVLProcessor tokenises with add_special_tokens=False
