"""PP-DocLayout for the benchmarks and the tests: the hub's label list, class order, thresholds and preprocessor
settings (the tiny and real-size test checkpoints' configs), and the reference processor's pixels (what
transformers' image processor computes, with the torch calls torchvision's resize makes: PyPI's torchvision does not
import beside the local torch CPU build; tests/helpers/layout_reference.py has the reference's post-processing)."""

# PP-DocLayoutV2's labels in id order (the PaddleOCR-VL pipeline's label_list)
LABELS = ["abstract", "algorithm", "aside_text", "chart", "content", "display_formula", "doc_title", "figure_title",
          "footer", "footer_image", "footnote", "formula_number", "header", "header_image", "image",
          "inline_formula", "number", "paragraph_title", "reference", "reference_content", "seal", "table", "text",
          "vertical_text", "vision_footnote"]
# PaddlePaddle/PP-DocLayoutV2's class_order and class_thresholds per label
CLASS_ORDER = [4, 2, 14, 1, 5, 7, 8, 6, 11, 11, 9, 13, 10, 10, 1, 2, 3, 0, 2, 2, 12, 1, 2, 15, 6]
THRESHOLDS = [0.4 if n in ("display_formula", "doc_title", "inline_formula", "paragraph_title", "text",
                           "vertical_text") else 0.45 if n == "seal" else 0.5 for n in LABELS]
# the hub's preprocessor_config.json but the image processor type and size
PREPROCESSOR = {"do_resize": True, "resample": 3, "do_rescale": True, "rescale_factor": 0.00392156862745098,
                "do_normalize": True, "image_mean": [0, 0, 0], "image_std": [1, 1, 1]}


def reference_pixels(image, height, width, version="v2"):
    """The reference processor's pixel_values for a PIL RGB image (mean 0, std 1, factor 1/255, as the hub's).
    V2/V3: torchvision's uint8 resize (torch's native uint8 bicubic, antialias off) and the fused rescale+normalise
    (x - 0) / 255. V4: a float bicubic resize rounded and clamped to uint8, then x * (1/255)."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    x = torch.from_numpy(np.asarray(image, np.uint8).copy()).permute(2, 0, 1)[None]
    if version[-1] == "4":
        x = F.interpolate(x.float(), size=(height, width), mode="bicubic", align_corners=False, antialias=False)
        x = x.round().clamp(0, 255).to(torch.uint8).float() * 0.00392156862745098
        return ((x - 0.0) / 1.0).numpy()
    x = F.interpolate(x, size=(height, width), mode="bicubic", align_corners=False, antialias=False)
    mean = torch.tensor([0.0, 0.0, 0.0]) * (1.0 / (1 / 255))
    std = torch.tensor([1.0, 1.0, 1.0]) * (1.0 / (1 / 255))
    return ((x.float() - mean[:, None, None]) / std[:, None, None]).numpy()
