"""The reading-order network against transformers' PPDocLayoutV2ReadingOrder (tiny config, random weights) for
none, some and all boxes kept; the vote decoding against a direct transcription of the reference's formula."""

import numpy as np
import pytest

from ms_ocr.layout.postprocess import order_from_logits
from ms_ocr.layout.pp_doclayout_v2.reading_order import ReadingOrder, ReadingOrderConfig
from tests.helpers.native import bound
from tests.helpers.parity import rel_err

TINY = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64, num_hidden_layers=2, num_classes=6,
            coordinate_size=8, shape_size=8, relation_bias_embed_dim=8, global_pointer_head_size=8)
L = 12


@pytest.fixture(scope="module")
def pair(graph_mode):
    import mindspore as ms
    import torch
    from transformers.models.pp_doclayout_v2.configuration_pp_doclayout_v2 import PPDocLayoutV2ReadingOrderConfig
    from transformers.models.pp_doclayout_v2.modeling_pp_doclayout_v2 import PPDocLayoutV2ReadingOrder
    ref = PPDocLayoutV2ReadingOrder(PPDocLayoutV2ReadingOrderConfig(**TINY)).eval()
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, t in sorted(ref.state_dict().items()):
            noise = torch.randn(t.shape, generator=gen)
            if t.ndim >= 2:
                t.copy_(noise * (0.5 if "embeddings" in name else (1.0 / t[0].numel()) ** 0.5))
            elif name.endswith("weight"):
                t.copy_(1 + 0.2 * noise)
            else:
                t.copy_(0.2 * noise)
    ours = bound(ReadingOrder(ReadingOrderConfig.from_dict(TINY)))
    unused = ("encoder.rel_pos_x_bias.weight", "encoder.rel_pos_y_bias.weight")  # built but never used
    state = {k: v for k, v in ref.state_dict().items() if k not in unused}
    params = dict(ours.parameters_and_names())
    assert sorted(params) == sorted(state)
    for name, p in params.items():
        p.set_data(ms.Tensor(state[name].numpy()))
    return ref, ours


@pytest.mark.parametrize("kept", [0, 5, L])
def test_order_logits_match_reference(pair, kept):
    import mindspore as ms
    import torch
    ref, ours = pair
    rng = np.random.default_rng(kept)
    xy = rng.uniform(0, 900, (1, L, 2))
    wh = rng.uniform(5, 300, (1, L, 2))
    boxes = np.concatenate([xy, np.minimum(xy + wh, 1000)], -1).astype(np.float32)
    mask = np.arange(L)[None] < kept
    boxes[~mask] = 0
    labels = np.where(mask, rng.integers(0, TINY["num_classes"], (1, L)), 0).astype(np.int32)
    with torch.no_grad():
        want = ref(boxes=torch.tensor(boxes), labels=torch.tensor(labels, dtype=torch.long),
                   mask=torch.tensor(mask)).numpy()
    got = ours(ms.Tensor(boxes), ms.Tensor(labels), ms.Tensor(mask)).asnumpy()
    assert got.shape == want.shape == (1, L, L)
    assert rel_err(got, want) < 1e-4


def test_vote_decoding():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 7, 7)).astype(np.float32)
    s = 1 / (1 + np.exp(-logits))
    ranks = order_from_logits(logits)
    for b in range(2):
        votes = [sum(s[b, i, j] for i in range(j)) + sum(1 - s[b, j, k] for k in range(j + 1, 7)) for j in range(7)]
        assert ranks[b].tolist() == np.argsort(np.argsort(votes, kind="stable"), kind="stable").tolist()
    # a chain "0 before 1 before ... before 6" stated with confidence decodes to 0..6
    chain = np.where(np.arange(7)[:, None] < np.arange(7)[None], 8.0, -8.0).astype(np.float32)[None]
    assert order_from_logits(chain)[0].tolist() == list(range(7))
