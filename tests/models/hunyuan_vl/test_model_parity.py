"""HunyuanOCR's XD-RoPE tables against the reference (its vision tower, prefill and cached decode parity are generated
from tests/matrix/models.py, tests/matrix/suite.py)."""

import numpy as np
import torch


def test_xdrope_tables_match_reference(hy_pipeline, hy_reference):
    """cos/sin of the NTK-alpha XD-RoPE for 4 distinct position rows (pairs mix axes as the reference's)."""
    from mindspore import Tensor

    pos = np.stack([np.arange(40), np.arange(40) % 7, np.arange(40) // 7, np.arange(40) // 20]).astype(np.int64)
    rotary = hy_reference.model.language_model.rotary_emb
    with torch.no_grad():
        cos_ref, sin_ref = rotary(torch.zeros(1, dtype=torch.float32), torch.tensor(pos)[:, None])
    cos, sin = hy_pipeline.runtime.model.model.rotary(Tensor(pos[:, None].astype(np.int32)))
    assert np.abs(cos.asnumpy()[0, 0] - cos_ref[0].numpy()).max() < 1e-5
    assert np.abs(sin.asnumpy()[0, 0] - sin_ref[0].numpy()).max() < 1e-5
    assert not hy_pipeline.runtime.model.model.rotary.paired
