"""The PP-DocLayout hybrid encoder (AIFI + CCFM) against transformers' PPDocLayoutV2HybridEncoder on a tiny config
with random weights and batch-norm statistics, non-square maps; with and without AIFI's position embedding."""

import numpy as np
import pytest

from ms_ocr.layout.config import LayoutConfig
from ms_ocr.layout.encoder import HybridEncoder, sine_position_embedding
from bench.real_size import randomize_with_stats_
from tests.helpers.native import bound
from tests.helpers.parity import rel_err

TINY = dict(encoder_hidden_dim=32, encoder_in_channels=[32, 32, 32], encoder_ffn_dim=48, num_attention_heads=4,
            encoder_layers=1, d_model=32)


@pytest.mark.parametrize("eval_size", [None, [64, 64]])
def test_hybrid_encoder_matches_reference(eval_size, graph_mode):
    import mindspore as ms
    import torch
    from transformers import PPDocLayoutV2Config as RefConfig
    from transformers.models.pp_doclayout_v2.modeling_pp_doclayout_v2 import PPDocLayoutV2HybridEncoder
    raw = dict(TINY, eval_size=eval_size)
    ref = PPDocLayoutV2HybridEncoder(RefConfig(**raw)).eval()
    randomize_with_stats_(ref, 5)
    ours = bound(HybridEncoder(LayoutConfig.from_dict(raw)))
    state = {k: v for k, v in ref.state_dict().items() if not k.endswith("num_batches_tracked")}
    params = dict(ours.parameters_and_names())
    assert sorted(params) == sorted(state)
    for name, p in params.items():
        p.set_data(ms.Tensor(state[name].numpy()))
    rng = np.random.default_rng(1)
    for h, w in ((12, 16), (10, 6)):  # strides 8/16/32 of a 3:4 page and a tall one
        feats = [rng.standard_normal((1, 32, h * 4 // s, w * 4 // s)).astype(np.float32) for s in (1, 2, 4)]
        with torch.no_grad():
            want = [t.numpy() for t in ref(inputs_embeds=[torch.tensor(f) for f in feats]).last_hidden_state]
        pos = (ours.position(*feats[2].shape[2:]),)
        got = [t.asnumpy() for t in ours(tuple(ms.Tensor(f) for f in feats), pos)]
        assert [g.shape for g in got] == [x.shape for x in want]
        for g, x in zip(got, want):
            assert rel_err(g, x) < 1e-5


def test_sine_table_matches_reference():
    import torch
    from transformers.models.pp_doclayout_v2.modeling_pp_doclayout_v2 import build_2d_sinusoidal_position_embedding
    want = build_2d_sinusoidal_position_embedding(5, 7, 32, 10000.0, dtype=torch.float32).numpy()
    assert np.array_equal(sine_position_embedding(5, 7, 32, 10000), want)
