"""Which HunyuanOCR a checkpoint folder holds: 1.0 (the hub repository's `v1.0/` folder) or HunyuanOCR-1.5 (its
root), told from the files alone; a folder whose files do not say, or contradict each other, is refused.

What tells them apart (docs/model-versions.md, section 4):
- config.json's layout: 1.0's file keeps every text field at the root; 1.5's nests them in `text_config` (so does a
  transformers `save_pretrained` of either, which is why the layout alone only says 1.0 when it is flat);
- `vision_config.max_vit_seq_len`, the vision tower's sequence budget: 16,384 in 1.0, 65,536 in 1.5 (pages up to
  ~4096x4096 pixels). transformers keeps the field through a load and save (absent means its default, 16,384);
- the hub root snapshot of 1.5 holds the archived 1.0 in a `v1.0/` subfolder.
"""

import os

from ms_ocr.config_utils import CheckpointError, load_config_json, require_model_type

V1_SEQ_LEN, V1_5_SEQ_LEN = 16384, 65536
CANDIDATES = "HunyuanOCR 1.0 (tencent/HunyuanOCR v1.0/) or HunyuanOCR-1.5 (tencent/HunyuanOCR root)"


def evidence(model_dir):
    """[(version or None, why)] of what the folder's files say."""
    raw = load_config_json(model_dir)
    require_model_type(raw, ("hunyuan_vl",), "hunyuan-ocr")
    found = []
    if raw.get("text_config") is None:
        found.append(("1.0", "config.json keeps the text fields at the root (1.0's layout)"))
    seq_len = (raw.get("vision_config") or {}).get("max_vit_seq_len", V1_SEQ_LEN)
    if seq_len == V1_SEQ_LEN:
        found.append(("1.0", f"vision_config.max_vit_seq_len is {seq_len} (1.0's)"))
    elif seq_len == V1_5_SEQ_LEN:
        found.append(("1.5", f"vision_config.max_vit_seq_len is {seq_len} (1.5's)"))
    else:
        found.append((None, f"vision_config.max_vit_seq_len is {seq_len}, neither version's"))
    if os.path.isfile(os.path.join(model_dir, "v1.0", "config.json")):
        found.append(("1.5", "the folder holds v1.0/ (the hub root of 1.5)"))
    return found


def recognise(model_dir):
    """"1.0" or "1.5"; CheckpointError (one line naming both candidates) when the files say neither or both."""
    found = evidence(model_dir)
    versions = {version for version, _ in found if version is not None}
    if len(versions) == 1:
        return versions.pop()
    why = "; ".join(reason for _, reason in found)
    raise CheckpointError(f"cannot tell which HunyuanOCR {model_dir} holds, {CANDIDATES}: {why}")
