"""The processor skeleton shared by the Qwen2-VL-style VLMs (PaddleOCR-VL, HunyuanOCR).

Images: RGB, smart_resize to multiples of patch * merge, PIL resize, rescale, normalise, patchify. Text: the
checkpoint's chat template, each image placeholder expanded to the model's token count, tokenised; rope
position ids computed on the host. Subclasses fill in the model-specific hooks.
"""

import numpy as np
from PIL import Image

from ms_ocr.config_utils import CheckpointError
from ms_ocr.processing.chat import render_chat
from ms_ocr.processing.image import ImageError, normalize, rescale, to_chw_uint8, to_rgb
from ms_ocr.processing.settings import smart_resize


def check_patch_settings(settings, vision_cfg):
    if settings.patch_size != vision_cfg.patch_size or settings.merge_size != vision_cfg.spatial_merge_size:
        raise CheckpointError(f"preprocessor patch_size/merge_size {settings.patch_size}/{settings.merge_size} "
                              f"differ from the vision config's {vision_cfg.patch_size}/"
                              f"{vision_cfg.spatial_merge_size}")


class VLMProcessor:
    """A processor with the checkpoint's chat template (`messages`: the turns a prompt renders as) and pixel bounds
    (`settings`: processing.settings.ImageSettings), for the ViT-stack models (interfaces.Processor)."""

    enlarge_thin = False  # smart_resize variant (see processing.settings.smart_resize)
    mode = None  # no resolution modes

    def __init__(self, tokenizer, chat_template, settings, image_token_id):
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.settings = settings
        self.image_token_id = int(image_token_id)
        self.image_token = tokenizer.id_to_token(self.image_token_id)
        if self.image_token is None:
            raise CheckpointError(f"image_token_id {image_token_id} is not a token of the tokenizer")

    # ---- hooks ----------------------------------------------------------------------------------
    def resample(self):
        return Image.Resampling(self.settings.resample)

    def patchify(self, pixels):
        """[C, H, W] float32 -> (patches, gh, gw)."""
        raise NotImplementedError

    def empty_patches(self):
        raise NotImplementedError

    def image_token_count(self, grid):
        raise NotImplementedError

    def positions(self, token_types, grids):
        """(rope position ids [A, S], decode delta)."""
        raise NotImplementedError

    def messages(self, prompt, num_images):
        """One user turn with `num_images` images before the prompt."""
        content = [{"type": "image"}] * num_images + [{"type": "text", "text": prompt}]
        return [{"role": "user", "content": content}]

    def add_special_tokens(self, text):
        # transformers' apply_chat_template skips BOS/EOS when the rendered prompt already starts with BOS
        bos = self.tokenizer.special_tokens.get("bos_token")
        return not (bos and text.startswith(bos))

    # ---- shared -----------------------------------------------------------------------------------
    def preprocess_image(self, img):
        """One PIL image -> (patches float32, grid (1, gh, gw)).

        Always converted to RGB (every released preprocessor config sets do_convert_rgb); 16-bit and float modes
        are clipped to 0..255 by PIL exactly as in the reference.
        """
        s = self.settings
        rgb = to_rgb(img)
        if rgb.width == 0 or rgb.height == 0:
            raise ImageError(f"image has zero size ({rgb.width}x{rgb.height})")
        factor = s.patch_size * s.merge_size
        if s.do_resize:
            height, width = smart_resize(rgb.height, rgb.width, factor, s.min_pixels, s.max_pixels,
                                         enlarge_thin=self.enlarge_thin)
            rgb = rgb.resize((width, height), resample=self.resample())
        elif rgb.height % factor or rgb.width % factor:
            raise ImageError(f"{rgb.width}x{rgb.height} image is not a multiple of {factor} "
                             "and the preprocessor does not resize")
        pixels = to_chw_uint8(rgb)
        if s.do_rescale:
            pixels = rescale(pixels, s.rescale_factor)
        if s.do_normalize:
            pixels = normalize(pixels, s.image_mean, s.image_std)
        patches, gh, gw = self.patchify(pixels.astype(np.float32))
        return patches, (1, gh, gw)

    def render_prompt(self, prompt, num_images):
        return render_chat(self.chat_template, self.messages(prompt, num_images), add_generation_prompt=True,
                           **self.tokenizer.special_tokens)

    def __call__(self, images, prompt):
        """Model inputs for `images` (list of PIL images) and a prompt (a task prompt or free text)."""
        images = [images] if isinstance(images, Image.Image) else list(images)
        processed = [self.preprocess_image(img) for img in images]
        grids = np.array([g for _, g in processed], dtype=np.int64).reshape(-1, 3)
        pixel_values = np.concatenate([p for p, _ in processed]) if processed else self.empty_patches()
        text = self.render_prompt(prompt, len(images))
        parts = text.split(self.image_token)
        if len(parts) - 1 != len(images):
            raise ValueError(f"the chat template produced {len(parts) - 1} {self.image_token} placeholder(s) "
                             f"for {len(images)} image(s)")
        counts = [self.image_token_count(g) for g in grids]
        expanded = parts[0] + "".join(self.image_token * n + rest for n, rest in zip(counts, parts[1:]))
        input_ids = np.array(self.tokenizer.encode(expanded, add_special_tokens=self.add_special_tokens(text)),
                             dtype=np.int64)
        token_types = (input_ids == self.image_token_id).astype(np.int64)
        if int(token_types.sum()) != sum(counts):
            raise ValueError(f"tokenised prompt has {int(token_types.sum())} image tokens, expected {sum(counts)}")
        position_ids, rope_delta = self.positions(token_types, grids)
        return {"input_ids": input_ids, "pixel_values": pixel_values, "image_grid_thw": grids,
                "position_ids": position_ids, "rope_delta": rope_delta, "mm_token_type_ids": token_types,
                "text": text}

    def decode(self, ids, skip_special_tokens=True):
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
