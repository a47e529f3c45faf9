"""HGNetV2 backbone of the PP-DocLayout models against transformers' HGNetV2Backbone (tiny config, random weights and
batch-norm statistics), on non-square inputs of several sizes."""

import numpy as np
import pytest

from ms_ocr.layout.backbone import HGNetV2Backbone, HGNetV2Config
from bench.real_size import randomize_with_stats_
from tests.helpers.native import bound
from tests.helpers.parity import rel_err

TINY = dict(embedding_size=16, hidden_sizes=[16, 32, 48, 64], stem_channels=[3, 8, 12],
            stage_in_channels=[12, 16, 32, 48], stage_mid_channels=[8, 12, 16, 24],
            stage_out_channels=[16, 32, 48, 64], stage_num_blocks=[1, 1, 2, 1], stage_numb_of_layers=[3, 3, 3, 3],
            stage_downsample=[False, True, True, True], stage_light_block=[False, False, True, True],
            stage_kernel_size=[3, 3, 5, 5], out_features=["stage2", "stage3", "stage4"])


@pytest.fixture(scope="module")
def pair(graph_mode):
    from transformers import HGNetV2Backbone as Ref
    from transformers import HGNetV2Config as RefConfig
    ref = Ref(RefConfig(**TINY)).eval()
    randomize_with_stats_(ref, 3, gain=2.0)  # weights and statistics far from their init: every term matters
    ours = bound(HGNetV2Backbone(HGNetV2Config.from_dict(TINY)))
    state = {k: v for k, v in ref.state_dict().items() if not k.endswith("num_batches_tracked")}
    params = dict(ours.parameters_and_names())
    assert sorted(params) == sorted(state)  # the reference's names, nothing missing or extra
    import mindspore as ms
    for name, p in params.items():
        p.set_data(ms.Tensor(state[name].numpy()))
    return ref, ours


@pytest.mark.parametrize("shape", [(1, 3, 96, 128), (2, 3, 72, 56), (1, 3, 100, 70)])
def test_feature_maps_match_reference(pair, shape):
    import torch
    import mindspore as ms
    ref, ours = pair
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        want = [f.numpy() for f in ref(torch.tensor(x)).feature_maps]
    got = [f.asnumpy() for f in ours(ms.Tensor(x))]
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        assert rel_err(g, w) < 1e-5


def test_config_rejects_what_the_reference_would_mis_size():
    with pytest.raises(ValueError, match=r"hidden_sizes\[3\] must equal stage_out_channels\[3\]"):
        HGNetV2Config.from_dict(dict(TINY, hidden_sizes=[16, 32, 48, 96]))
    assert HGNetV2Config.from_dict({}).out_indices == [4]  # HGNetV2Config's own default: the last stage
    # a stage that skips the input projections (V3's stride-4 map) may differ, as in the L variant's stage1
    cfg = HGNetV2Config.from_dict(dict(TINY, hidden_sizes=[24, 32, 48, 64], out_features=["stage1", "stage2", "stage3",
                                                                                          "stage4"]), unprojected=1)
    assert cfg.out_indices == [1, 2, 3, 4]
