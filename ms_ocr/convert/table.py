"""Declarative rename tables: ordered regex renames (most specific first) and keys to drop."""

import re


# DeepSeek MoE checkpoints store each expert's projections apart: stacked into one [E, ...] Parameter per layer
EXPERT_STACKS = [(r"^(model\.layers\.\d+\.mlp\.experts)\.(?P<index>\d+)\.(gate_proj|up_proj|down_proj)\.weight$",
                  r"\1.\3")]
# DeepEncoder-v1 checkpoints (DeepSeek-OCR v1, Unlimited-OCR; transformers' save_pretrained writes the same names):
# vision parts under `vision.`, per-expert tensors stacked; CLIP's own patch conv (unused: SAM features are its
# patch embeddings) and buffers dropped
DEEPENCODER_V1_RENAMES = [(r"^model\.(sam_model|vision_model|projector|image_newline|view_seperator)", r"vision.\1")]
DEEPENCODER_V1_DROPS = [r"^model\.vision_model\.embeddings\.patch_embedding\.",
                        r"^model\.vision_model\.embeddings\.position_ids$"]


class RenameTable:
    """chain=False: the first matching rename applies; chain=True: every matching rename, in order.

    stacks: (pattern with a named group `index`, replacement) rules applied after the renames: a matching
    key becomes slice `index` of a stacked local Parameter, returned as (local name, index) (per-expert
    MoE tensors -> one [E, ...] Parameter)."""

    def __init__(self, renames=(), drops=(), chain=False, stacks=()):
        self.renames = [(re.compile(p), r) for p, r in renames]
        self.drops = [re.compile(p) for p in drops]
        self.chain = chain
        self.stacks = [(re.compile(p), r) for p, r in stacks]

    def __call__(self, name):
        """Local parameter name for a checkpoint key, or None when the key is dropped."""
        if any(p.search(name) for p in self.drops):
            return None
        for pattern, repl in self.renames:
            new, n = pattern.subn(repl, name)
            if n and not self.chain:
                name = new
                break
            name = new
        for pattern, repl in self.stacks:
            match = pattern.search(name)
            if match:
                return pattern.sub(repl, name), int(match.group("index"))
        return name


def deepencoder_v1_table(tied):
    """The DeepEncoder-v1 table; a tied head (`tied`) drops a stored lm_head."""
    drops = DEEPENCODER_V1_DROPS + ([r"^lm_head\.weight$"] if tied else [])
    return RenameTable(DEEPENCODER_V1_RENAMES, drops, stacks=EXPERT_STACKS)
