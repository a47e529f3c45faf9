"""python -m ms_ocr.convert --model paddleocr-vl --src HF_DIR --dst OUT_DIR

Writes the checkpoint under ms_ocr's parameter names (dropping what the reference ignores), in the
source precision, plus the tokenizer/processor/config files, so `infer --model-path OUT_DIR` works.
Converting an already converted folder gives the same files (the tables are idempotent).
"""

import json
import os
import shutil
import sys

import numpy as np

os.environ.setdefault("GLOG_v", "3")

from ms_ocr.config_utils import CheckpointError  # noqa: E402
from ms_ocr.convert.safetensors_io import iter_checkpoint, save_file  # noqa: E402

SIDE_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "processor_config.json",
              "tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
              "added_tokens.json", "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt")
WEIGHTS = "model.safetensors"
MARKER = "ms_ocr_convert.json"


def expected_shapes(spec, cfg):
    net = spec.build(cfg)
    from ms_ocr.convert.loader import is_state
    return {p.name: tuple(p.shape) for p in net.get_parameters() if not is_state(p.name)}


def convert(model, src, dst):
    from ms_ocr import models
    spec = models.get(model)
    cfg = spec.config_from_dir(src)
    table = spec.name_table(cfg)
    expected = expected_shapes(spec, cfg)
    out, unexpected, stacked = {}, [], {}
    for name, arr, tag in iter_checkpoint(src):
        local = table(name)
        if local is None:
            continue
        if isinstance(local, tuple):  # one expert of a stacked [E, ...] parameter
            local, index = local
            if local not in expected or tuple(arr.shape) != expected[local][1:]:
                unexpected.append(name)
                continue
            stacked.setdefault(local, ({}, tag))[0][index] = arr
            continue
        if local not in expected:
            unexpected.append(name)
            continue
        if tuple(arr.shape) != expected[local]:
            raise CheckpointError(f"{name} has shape {tuple(arr.shape)}, expected {expected[local]}")
        out[local] = (arr, tag)
    for local, (slices, tag) in stacked.items():
        if sorted(slices) == list(range(expected[local][0])):
            out[local] = (np.stack([slices[i] for i in range(len(slices))]), tag)
    missing = sorted(set(expected) - set(out))
    if missing or unexpected:
        raise CheckpointError(f"{src} does not match {model}: missing {missing[:8]}, unexpected {unexpected[:8]}")
    os.makedirs(dst, exist_ok=True)
    same = os.path.realpath(src) == os.path.realpath(dst)
    save_file({k: v for k, v in sorted(out.items())}, os.path.join(dst, WEIGHTS + (".new" if same else "")))
    if same:
        for fn in os.listdir(dst):
            if fn.endswith(".safetensors") or fn == "model.safetensors.index.json":
                os.remove(os.path.join(dst, fn))
        os.replace(os.path.join(dst, WEIGHTS + ".new"), os.path.join(dst, WEIGHTS))
    else:
        for fn in SIDE_FILES:
            if os.path.isfile(os.path.join(src, fn)):
                shutil.copyfile(os.path.join(src, fn), os.path.join(dst, fn))
    with open(os.path.join(dst, MARKER), "w", encoding="utf-8") as f:
        json.dump({"model": spec.package, "format": "ms_ocr-safetensors", "tensors": len(out)}, f, indent=1)
    return len(out)


def build_parser():
    from ms_ocr import models
    from ms_ocr.cli import Parser
    p = Parser(prog="python -m ms_ocr.convert", description="Convert a Hugging Face checkpoint to ms_ocr's layout.")
    p.add_argument("--model", required=True, help=", ".join(models.names()))
    p.add_argument("--src", required=True, help="Hugging Face checkpoint folder")
    p.add_argument("--dst", required=True, help="output folder")
    return p


def run(argv):
    from ms_ocr.cli import model_spec
    args = build_parser().parse_args(argv)
    model_spec(args)  # an unknown --model is a usage error
    n = convert(args.model, args.src, args.dst)
    print(f"wrote {n} tensors to {os.path.join(args.dst, WEIGHTS)}")
    return 0


def main(argv=None):
    """Wrong options: one `error:` line, exit 2; a failed conversion: one line, exit 1 (MS_OCR_DEBUG=1 shows the
    traceback)."""
    from ms_ocr.cli import cli_main
    return cli_main(run, argv)


if __name__ == "__main__":
    sys.exit(main())
