"""The demo model: a tiny PaddleOCR-VL (transformers' own class) configured for text lines, its image processor,
the batcher that turns lines into training / generation inputs, the training-only forms of two vision steps, the
metrics (CER) and the export in the hub's layout."""

import os
import tempfile

from training.demo.tokenizer import TOKEN_IDS, VOCAB_SIZE, _write_json, prompt_text, write_tokenizer

MIN_PIXELS, MAX_PIXELS = 28 * 28, 28 * 28 * 96  # a line up to 28 x 2688 px keeps its size
# --data crops: up to 48 image tokens. The vision tower's patches dominate a crop step: at 128 tokens a step of 32
# crops took ~1.4 s on the 2-core Xeon, at 80 ~1.0 s, at 48 about half of that (docs/journal/demo-training.md); a
# block of four lines at 20 px keeps ~0.75 of its size
MAX_PIXELS_CROPS = 28 * 28 * 48
VISION = dict(hidden_size=192, intermediate_size=576, num_hidden_layers=4, num_attention_heads=4, num_channels=3,
              image_size=224, patch_size=14, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6,
              spatial_merge_size=2)
TEXT = dict(vocab_size=VOCAB_SIZE, hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-5,
            use_bias=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# MRoPE sections (t, h, w) take contiguous slices of the frequencies, w the lowest: with the hub's theta 5e5 and
# [8, 12, 12] a column index below 100 turns the w pairs by < 0.03 rad, so the decoder could hardly tell image
# columns apart. Lines have one row of tokens, so w gets the high frequencies (sums to head_dim / 2).
MROPE_SECTION = [4, 4, 24]
ROPE_THETA = 10000.0
SPECIAL_IDS = dict(image_token_id=TOKEN_IDS["<|IMAGE_PLACEHOLDER|>"], video_token_id=TOKEN_IDS["<|VIDEO_PLACEHOLDER|>"],
                   vision_start_token_id=TOKEN_IDS["<|IMAGE_START|>"], vision_end_token_id=TOKEN_IDS["<|IMAGE_END|>"])
IMAGE_MEAN, IMAGE_STD = [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]
# Guided attention (training only; the checkpoint is the plain architecture): one head of one decoder layer is
# taught to look, when it predicts a character, at the image token whose 28-px column holds that character's
# centre (known from the renderer). Without it the decoder has to find the text-to-image alignment by itself:
# 12 digits on one clean line stayed at chance for 340 steps of batch 32, and the full task at CER ~0.8 after
# 1,500 steps; 3 digits (2 image tokens, nothing to align) learned in 140 steps.
GUIDE_LAYER, GUIDE_HEAD = 2, 0
# Reading aid (training only, discarded at export): a linear classifier on the projector's output must name the
# characters each image token holds, so the vision tower gets a direct signal per glyph instead of one that
# has to pass through the decoder first (with the guide alone the loss followed the unguided run's).


def text_config(args):
    """TEXT with the decoder size the options ask for."""
    return {**TEXT, "num_hidden_layers": args.text_layers, "intermediate_size": args.text_intermediate}


def model_config(text=TEXT):
    from transformers import PaddleOCRVLConfig

    rope = {"rope_type": "default", "rope_theta": ROPE_THETA, "mrope_section": MROPE_SECTION}
    # tied head: transformers ties the hub's flat layout whatever its flag says, so train it tied
    return PaddleOCRVLConfig(text_config={**text, "rope_parameters": rope, "tie_word_embeddings": True},
                             vision_config=dict(VISION), tie_word_embeddings=True, **SPECIAL_IDS)


def image_processor(max_pixels=MAX_PIXELS):
    from transformers import PaddleOCRVLImageProcessorPil

    return PaddleOCRVLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=max_pixels, image_mean=IMAGE_MEAN,
                                        image_std=IMAGE_STD)


class Batcher:
    """Images + answers -> the model's training or generation inputs (answer-only labels)."""

    def __init__(self, tok, processor):
        self.tok, self.processor = tok, processor
        self.eos = TOKEN_IDS["</s>"]

    def encode_images(self, images):
        out = self.processor(images=images, return_tensors="pt")
        merged = (out["image_grid_thw"].prod(-1) // 4).tolist()
        return out["pixel_values"], out["image_grid_thw"], merged

    def prompt_ids(self, image_tokens):
        return self.tok.encode(prompt_text(image_tokens)).ids

    def train_inputs(self, images, texts, centres=None):
        """Model inputs with answer-only labels; with `centres` (character x centres per image, from the
        renderer) also `guide`: for each position that predicts an answer token, the sequence index of the image
        token holding that token's characters (-1 elsewhere)."""
        import torch

        pixels, grid, merged = self.encode_images(images)
        seqs, labels, guides, aux_index, aux_target = [], [], [], [], []
        offset = 0  # first image token of image b among all images' tokens (the projector's output rows)
        for b, (n, text) in enumerate(zip(merged, texts)):
            enc = self.tok.encode(text)
            prompt, answer = self.prompt_ids(n), enc.ids + [self.eos]
            seqs.append(prompt + answer)
            labels.append([-100] * len(prompt) + answer)
            if centres is not None:
                guides.append(self._guide(prompt, enc.offsets, centres[b], images[b].size, grid[b].tolist()))
                start = prompt.index(SPECIAL_IDS["image_token_id"])
                for q, k in enumerate(guides[-1]):
                    if k >= 0:
                        aux_index.append(offset + k - start)
                        aux_target.append(answer[q + 1 - len(prompt)])
            offset += n
        width = max(map(len, seqs))
        ids = torch.tensor([s + [0] * (width - len(s)) for s in seqs])
        lab = torch.tensor([s + [-100] * (width - len(s)) for s in labels])
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
        out = dict(input_ids=ids, attention_mask=mask, labels=lab, pixel_values=pixels, image_grid_thw=grid,
                   mm_token_type_ids=(ids == SPECIAL_IDS["image_token_id"]).int())
        if centres is not None:
            out["guide"] = torch.tensor([g + [-1] * (width - len(g)) for g in guides])
            out["aux_index"], out["aux_target"] = torch.tensor(aux_index), torch.tensor(aux_target)
        return out

    @staticmethod
    def _guide(prompt, offsets, centres, image_size, grid_thw):
        """The image token each answer token's characters sit in. `centres`: per character its x (a line: the
        middle row of tokens) or its (x, y), None for a newline (guides nothing)."""
        _, rows, cols = grid_thw[0], grid_thw[1] // 2, grid_thw[2] // 2  # merged 2x2 tokens
        first = prompt.index(SPECIAL_IDS["image_token_id"])
        sx, sy = grid_thw[2] * 14 / image_size[0], grid_thw[1] * 14 / image_size[1]  # smart_resize's factors
        guide = [-1] * (len(prompt) + len(offsets) + 1)
        for j, (start, end) in enumerate(offsets):
            points = [c for c in centres[start:end] if c is not None]
            if not points:
                continue
            if isinstance(points[0], tuple):
                x = sum(p[0] for p in points) / len(points) * sx
                row = min(rows - 1, max(0, int(sum(p[1] for p in points) / len(points) * sy // 28)))
            else:
                x, row = sum(points) / len(points) * sx, rows // 2
            guide[len(prompt) + j - 1] = first + row * cols + min(cols - 1, max(0, int(x // 28)))
        return guide

    def generate_inputs(self, images):
        import torch

        pixels, grid, merged = self.encode_images(images)
        seqs = [self.prompt_ids(n) for n in merged]
        width = max(map(len, seqs))
        ids = torch.tensor([[0] * (width - len(s)) + s for s in seqs])  # left padding for generate
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
        return dict(input_ids=ids, attention_mask=mask, pixel_values=pixels, image_grid_thw=grid,
                    mm_token_type_ids=(ids == SPECIAL_IDS["image_token_id"]).int())


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def cer(predictions, references):
    """Character error rate: total edit distance / total reference characters."""
    return sum(edit_distance(p, r) for p, r in zip(predictions, references)) / max(1, sum(map(len, references)))


def greedy_texts(model, batcher, images, max_new_tokens=64, batch=16):
    """Greedy answers of `model` for `images`, `batch` at a time (transformers' generate)."""
    import torch

    texts = []
    for i in range(0, len(images), batch):
        inputs = batcher.generate_inputs(images[i:i + batch])
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                 eos_token_id=batcher.eos, pad_token_id=0)
        for row in out[:, inputs["input_ids"].shape[1]:].tolist():
            row = row[:row.index(batcher.eos)] if batcher.eos in row else row
            texts.append(batcher.tok.decode(row, skip_special_tokens=True))
    return texts


def _patch_embedding_as_linear(conv):
    """The stride-14 14x14 convolution of the patch embedding applied to 14x14 patches is one matrix product;
    as a convolution its backward took ~7 ms a step of 16 lines (the weight and its name are unchanged)."""
    import torch

    def forward(x):
        assert tuple(x.shape[-2:]) == tuple(conv.kernel_size) == tuple(conv.stride), x.shape
        out = torch.nn.functional.linear(x.reshape(x.shape[0], -1), conv.weight.reshape(conv.out_channels, -1),
                                         conv.bias)
        return out.view(x.shape[0], conv.out_channels, 1, 1)

    conv.forward = forward


def _padded_vision_attention(self, hidden_states, cu_seqlens, position_embeddings, max_seqlen=None, **kwargs):
    """PaddleOCRVisionAttention.forward (eager) with the batch's images in one padded product instead of a loop
    over images: the same function (keys beyond an image's length are masked), ~16x fewer small operations."""
    import torch
    from transformers.models.paddleocr_vl.modeling_paddleocr_vl import apply_rotary_pos_emb_vision

    n = hidden_states.shape[0]
    q, k, v = (proj(hidden_states).view(n, self.num_heads, self.head_dim)
               for proj in (self.q_proj, self.k_proj, self.v_proj))
    q, k = apply_rotary_pos_emb_vision(q, k, *position_embeddings)
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    pos = torch.arange(int(lengths.max()))
    valid = pos[None] < lengths[:, None]  # (images, longest)
    index = (cu_seqlens[:-1, None] + pos[None]).clamp(max=n - 1)
    q, k, v = (t.index_select(0, index.reshape(-1)).view(*index.shape, *t.shape[1:]).transpose(1, 2)
               for t in (q, k, v))  # (images, heads, longest, head_dim)
    scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(weights, v).transpose(1, 2)[valid]  # (patches, heads, head_dim), the images in order
    return self.out_proj(out.reshape(n, -1)), None


def fast_vision(model):
    """Training-only forms of two vision-tower steps, the same functions as transformers' (checked in
    tests/demo/test_train.py): the patch embedding as a matrix product, attention over all images at once."""
    import types

    model.model.visual.set_attn_implementation("eager")
    tower = model.model.visual.vision_model
    _patch_embedding_as_linear(tower.embeddings.patch_embedding)
    for layer in tower.encoder.layers:
        layer.self_attn.forward = types.MethodType(_padded_vision_attention, layer.self_attn)


def flat_config(text=TEXT):
    """config.json in the hub's original flat form (text fields at the root, rope_scaling)."""
    vision = {"architectures": ["PaddleOCRVisionModel"], "model_type": "paddleocr_vl", **VISION,
              "attention_dropout": 0.0, "pad_token_id": 0, "temporal_patch_size": 2, "tokens_per_second": 2,
              "torch_dtype": "bfloat16"}
    return {"architectures": ["PaddleOCRVLForConditionalGeneration"], "model_type": "paddleocr_vl", **text,
            "rope_theta": ROPE_THETA,
            "rope_scaling": {"mrope_section": MROPE_SECTION, "rope_type": "default", "type": "default"},
            "tie_word_embeddings": True, **SPECIAL_IDS, "use_3d_rope": True, "rope_is_neox_style": True,
            "use_cache": False, "torch_dtype": "bfloat16", "vision_config": vision}


def export(model, tok, out_dir, text=TEXT, max_pixels=MAX_PIXELS, text_line_height=None):
    """The checkpoint in the hub's layout, bf16 weights; `text_line_height` (a line reader: ms_ocr reads each text
    line of a crop scaled to it, processing/text_lines.py) goes into preprocessor_config.json."""
    import torch
    from safetensors.torch import load_file, save_file

    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model.to(torch.bfloat16).save_pretrained(tmp)  # the hub's names (visual.vision_model.*, mlp_AR.*, model.*)
        state = {}
        for name in sorted(os.listdir(tmp)):
            if name.endswith(".safetensors"):
                state.update(load_file(os.path.join(tmp, name)))
    model.float()
    save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    _write_json(os.path.join(out_dir, "config.json"), flat_config(text))
    _write_json(os.path.join(out_dir, "generation_config.json"),
                {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "use_cache": True})
    _write_json(os.path.join(out_dir, "preprocessor_config.json"),
                {"min_pixels": MIN_PIXELS, "max_pixels": max_pixels, "image_mean": IMAGE_MEAN, "image_std": IMAGE_STD,
                 "patch_size": 14, "merge_size": 2, "temporal_patch_size": 1, "resample": 3,
                 "rescale_factor": 1 / 255, "do_convert_rgb": True, "do_normalize": True, "do_rescale": True,
                 "do_resize": True, "image_processor_type": "PaddleOCRVLImageProcessor",
                 **({"text_line_height": text_line_height} if text_line_height else {})})
    write_tokenizer(tok, out_dir)
