"""Multi-scale deformable attention, the native DeformableSample kernel and the composed bilinear gathers, against
transformers' module (grid_sample), with sampling points inside, on the border and outside the maps, on three
non-square levels."""

import dataclasses

import numpy as np
import pytest

from ms_ocr.layout.deformable import MultiscaleDeformableAttention
from tests.helpers.parity import rel_err


@pytest.mark.parametrize("native", [True, False])
def test_deformable_attention_matches_reference(graph_mode, native, monkeypatch):
    import mindspore as ms
    import torch
    from transformers import PPDocLayoutV2Config as RefConfig
    from transformers.models.pp_doclayout_v2.modeling_pp_doclayout_v2 import (
        PPDocLayoutV2MultiscaleDeformableAttention as Ref)
    d, heads, points = 32, 4, 4
    shapes = ((12, 16), (6, 8), (3, 4))
    ref = Ref(RefConfig(d_model=d, num_feature_levels=3), num_heads=heads, n_points=points).eval()
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, t in sorted(ref.state_dict().items()):
            scale = 1.5 if name.startswith("sampling_offsets") else 0.3  # offsets that reach past the maps
            t.copy_(torch.randn(t.shape, generator=gen) * scale)
    from ms_ocr import ops as K
    kn = K.choose("CPU")
    if native:
        assert kn.deformable is not None, "DeformableSample is not routed on this machine"
    else:
        kn = dataclasses.replace(kn, deformable=None)
    ours = K.bind(MultiscaleDeformableAttention(d, heads, 3, points), kn)
    assert (K.deformable_native(ours.kernels) is not None) == native
    state = ref.state_dict()
    params = dict(ours.parameters_and_names())
    assert sorted(params) == sorted(state)
    for name, p in params.items():
        p.set_data(ms.Tensor(state[name].numpy()))
    rng = np.random.default_rng(0)
    b, q = 2, 7
    s = sum(h * w for h, w in shapes)
    hidden = rng.standard_normal((b, q, d)).astype(np.float32)
    pos = rng.standard_normal((b, q, d)).astype(np.float32)
    memory = rng.standard_normal((b, s, d)).astype(np.float32)
    centre = rng.uniform(-0.05, 1.05, (b, q, 2))  # some centres just outside the image
    size = rng.uniform(0.05, 0.9, (b, q, 2))
    reference = np.concatenate([centre, size], -1).astype(np.float32)
    spatial = torch.tensor(shapes)
    with torch.no_grad():
        want = ref(torch.tensor(hidden), encoder_hidden_states=torch.tensor(memory),
                   position_embeddings=torch.tensor(pos), reference_points=torch.tensor(reference)[:, :, None],
                   spatial_shapes=spatial, spatial_shapes_list=list(shapes),
                   level_start_index=torch.tensor([0, 192, 240]))[0].numpy()
    got = ours(ms.Tensor(hidden), ms.Tensor(pos), ms.Tensor(memory), ms.Tensor(reference), shapes).asnumpy()
    assert rel_err(got, want) < 1e-5
