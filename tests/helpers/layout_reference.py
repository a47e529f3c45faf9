"""The reference's PP-DocLayoutV2 post-processing, run from the installed transformers source.

transformers' image_processing_pp_doclayout_v2 module imports torchvision at the top, and PyPI's torchvision does
not import beside the local torch 2.13 CPU build; the two methods the tests need (`_get_order_seqs`,
`post_process_object_detection`) are pure torch, so they are compiled from that file's own source here."""

import ast
import os


def reference_postprocessor():
    """An object with the reference class's `post_process_object_detection` and `_get_order_seqs`."""
    import torch
    import transformers
    path = os.path.join(os.path.dirname(transformers.__file__), "models", "pp_doclayout_v2",
                        "image_processing_pp_doclayout_v2.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "PPDocLayoutV2ImageProcessor")
    wanted = ("_get_order_seqs", "post_process_object_detection")
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert sorted(m.name for m in methods) == sorted(wanted), "reference methods renamed"
    module = ast.Module(body=[ast.ClassDef(name="Reference", bases=[], keywords=[], body=methods, decorator_list=[],
                                           type_params=[])], type_ignores=[])
    namespace = {"torch": torch, "TensorType": object}
    exec(compile(ast.fix_missing_locations(module), path, "exec"), namespace)  # noqa: S102 - the reference's code
    return namespace["Reference"]()


def reference_pixels(image, height, width):
    """The reference processor's pixel_values for a PIL RGB image: torchvision's uint8 resize (torch's native uint8
    bicubic, antialias off) and the fused rescale+normalise (x - 0) / 255."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    x = torch.from_numpy(np.asarray(image, np.uint8).copy()).permute(2, 0, 1)[None]
    x = F.interpolate(x, size=(height, width), mode="bicubic", align_corners=False, antialias=False)
    mean = torch.tensor([0.0, 0.0, 0.0]) * (1.0 / (1 / 255))
    std = torch.tensor([1.0, 1.0, 1.0]) * (1.0 / (1 / 255))
    return ((x.float() - mean[:, None, None]) / std[:, None, None]).numpy()
