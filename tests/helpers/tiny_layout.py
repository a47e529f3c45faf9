"""A tiny random PP-DocLayoutV2 checkpoint with the hub's 25 labels, saved by transformers (original weight names),
plus the hub's preprocessor_config.json at a small input size."""

import json
import os

from bench.layout import CLASS_ORDER, LABELS, PREPROCESSOR, THRESHOLDS
from bench.real_size import randomize_with_stats_
BACKBONE = dict(model_type="hgnet_v2", stem_channels=[3, 8, 8], stage_in_channels=[8, 16, 32, 48],
                stage_mid_channels=[8, 8, 16, 16], stage_out_channels=[16, 32, 48, 64],
                hidden_sizes=[16, 32, 48, 64], stage_num_blocks=[1, 1, 1, 1], stage_numb_of_layers=[2, 2, 2, 2],
                stage_downsample=[False, True, True, True], stage_light_block=[False, False, True, True],
                stage_kernel_size=[3, 3, 5, 5], depths=[1, 1, 1, 1], out_features=["stage2", "stage3", "stage4"])
READING_ORDER = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64, num_hidden_layers=2, num_classes=20,
                     coordinate_size=8, shape_size=8, relation_bias_embed_dim=8, global_pointer_head_size=8)
CONFIG = dict(backbone_config=BACKBONE, encoder_in_channels=[32, 48, 64], encoder_hidden_dim=32, encoder_ffn_dim=48,
              num_attention_heads=4, d_model=32, decoder_in_channels=[32, 32, 32], decoder_ffn_dim=48,
              decoder_layers=2, decoder_attention_heads=4, num_queries=30,
              id2label=dict(enumerate(LABELS)), class_thresholds=THRESHOLDS, class_order=CLASS_ORDER,
              reading_order_config=READING_ORDER)
SIZE = 256  # input side (the hub's is 800)


def tiny_layout_model(seed=21):
    from transformers import PPDocLayoutV2Config, PPDocLayoutV2ForObjectDetection
    model = PPDocLayoutV2ForObjectDetection(PPDocLayoutV2Config(**CONFIG)).eval()
    return randomize_with_stats_(model, seed)


def make_tiny_layout_checkpoint(out_dir, seed=21):
    model = tiny_layout_model(seed)
    model.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "PPDocLayoutV2ImageProcessor", "do_resize": True, "resample": 3,
                   "size": {"height": SIZE, "width": SIZE}, "do_rescale": True,
                   "rescale_factor": 0.00392156862745098, "do_normalize": True, "image_mean": [0, 0, 0],
                   "image_std": [1, 1, 1]}, f)
    return out_dir


# PP-DocLayoutV3 / V4 at the same tiny widths, the hub's 25 labels (V3: the backbone also returns its stride-4 stage
# for the mask branch; V4: with the page-geometry head).
_RTDETR = {k: v for k, v in CONFIG.items() if k not in ("backbone_config", "class_thresholds", "class_order",
                                                         "reading_order_config", "d_model")}
CONFIG_V3 = dict(_RTDETR, backbone_config=dict(BACKBONE, out_features=["stage1", "stage2", "stage3", "stage4"]),
                 d_model=32, x4_feat_dim=16, mask_feature_channels=[16, 16], num_prototypes=8,
                 global_pointer_head_size=8)
CONFIG_V4 = dict(_RTDETR, backbone_config=BACKBONE, hidden_size=32, global_pointer_head_size=8, deform_pred=True,
                 deform_conv_width=8, deform_kbins=9)


def tiny_reference_model(version, seed=21, mask_gain=1.0, **overrides):
    """The transformers reference of a tiny PP-DocLayoutV3 ("v3") or V4 ("v4"), weights and statistics random. V3's
    `mask_gain` scales the mask logits (its mask query head's last layer), so masks pass high thresholds in parts."""
    import torch
    import transformers
    n = version[-1]
    config = getattr(transformers, f"PPDocLayoutV{n}Config")(**dict(CONFIG_V3 if n == "3" else CONFIG_V4, **overrides))
    model = randomize_with_stats_(getattr(transformers, f"PPDocLayoutV{n}ForObjectDetection")(config).eval(), seed)
    if mask_gain != 1.0:
        with torch.no_grad():
            for t in model.model.mask_query_head.layers[-1].parameters():
                t.mul_(mask_gain)
    return model


def make_tiny_checkpoint(out_dir, version, seed=21, size=SIZE, **overrides):
    """tiny_reference_model saved by transformers (original weight names) with a preprocessor_config.json at `size`."""
    model = tiny_reference_model(version, seed, **overrides)
    model.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "preprocessor_config.json"), "w") as f:
        json.dump(dict(PREPROCESSOR, image_processor_type=f"PPDocLayoutV{version[-1]}ImageProcessor",
                       size={"height": size, "width": size}), f)
    return model


def load_reference_state(ours, state):
    """Our Cell's Parameters set from a reference state dict (torch tensors), names matched one to one."""
    import mindspore as ms
    params = dict(ours.parameters_and_names())
    assert sorted(params) == sorted(state)
    for name, p in params.items():
        p.set_data(ms.Tensor(state[name].numpy()))


def blocks_page(w, h, blocks=12, seed=None):
    """A white page with `blocks` random filled rectangles (random weights detect arbitrary boxes on anything)."""
    import numpy as np
    from PIL import Image, ImageDraw
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    rng = np.random.default_rng(w if seed is None else seed)
    for _ in range(blocks):
        x, y = int(rng.integers(0, w - 60)), int(rng.integers(0, h - 20))
        d.rectangle([x, y, x + int(rng.integers(20, 200)), y + int(rng.integers(5, 60))],
                    fill=tuple(rng.integers(0, 200, 3).tolist()))
    return img
