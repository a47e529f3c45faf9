"""A layout checkpoint folder -> its LayoutSpec, config and model (strict loading), whichever version its
config.json's model_type names."""

from ms_ocr.config_utils import CheckpointError, load_config_json
from ms_ocr.layout.pp_doclayout_v2 import SPEC as PP_DOCLAYOUT_V2
from ms_ocr.layout.pp_doclayout_v3 import SPEC as PP_DOCLAYOUT_V3
from ms_ocr.layout.pp_doclayout_v4 import SPEC as PP_DOCLAYOUT_V4

SPECS = {spec.model_type: spec for spec in (PP_DOCLAYOUT_V2, PP_DOCLAYOUT_V3, PP_DOCLAYOUT_V4)}


def spec_for(raw, model_dir=""):
    """The LayoutSpec of a config.json (dict); a model_type that is not a layout model is refused in one line."""
    model_type = raw.get("model_type")
    if model_type not in SPECS:
        raise CheckpointError(f"{model_dir or 'the layout checkpoint'}: model_type {model_type!r} is not a layout "
                              f"model ms_ocr runs ({', '.join(SPECS)})")
    return SPECS[model_type]


def config_from_dir(model_dir):
    raw = load_config_json(model_dir)
    spec = spec_for(raw, model_dir)
    return spec, spec.config.from_dict(raw)


def load_model(model_dir, kernels=None):
    """(spec, config, the model with the folder's weights): strict (missing or unexpected keys are an error naming
    them), fp32, computing with `kernels` (default: those ops.kernels.choose gives MindSpore's device target)."""
    import mindspore as ms
    from ms_ocr.convert.loader import load_weights
    from ms_ocr.convert.safetensors_io import iter_checkpoint
    from ms_ocr.layout.backbone import fold_batch_norms
    from ms_ocr.ops import bind, choose
    spec, cfg = config_from_dir(model_dir)
    net = bind(spec.model(cfg), kernels or choose(ms.get_context("device_target")))
    load_weights(net, iter_checkpoint(model_dir), spec.name_table(cfg), ms.float32, None, source=model_dir)
    fold_batch_norms(net)
    return spec, cfg, net
