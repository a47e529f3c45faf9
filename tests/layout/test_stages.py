"""The staged run (layout/stages.py: the front graph, one decoder-layer graph with each layer's weights as inputs,
the heads) gives the whole graph's outputs bit for bit, for V2, V3 and V4 (tiny checkpoints), compiling the decoder
layer once; release() frees the graphs and the next call compiles them again."""

import numpy as np
import pytest

from tests.helpers.tiny_layout import SIZE, make_tiny_checkpoint, make_tiny_layout_checkpoint


@pytest.mark.parametrize("version", ["v2", "v3", "v4"])
def test_staged_equals_whole_graph(graph_mode, tmp_path, version):
    import mindspore as ms
    from ms_ocr.layout import load_model
    from ms_ocr.layout.stages import StagedModel
    if version == "v2":
        make_tiny_layout_checkpoint(str(tmp_path))
    else:
        make_tiny_checkpoint(str(tmp_path), version, seed=3)
    _, cfg, net = load_model(str(tmp_path))
    host = net.host_inputs(SIZE, SIZE)
    x = ms.Tensor(np.random.default_rng(1).uniform(0, 1, (1, 3, SIZE, SIZE)).astype(np.float32))
    want = [t.asnumpy() for t in net(x, *host)]
    staged = StagedModel(net, host)
    got = [t.asnumpy() for t in staged(x)]
    assert len(got) == len(want) == (5 if version == "v4" else 4)
    for g, w in zip(got, want):
        assert g.shape == w.shape and np.array_equal(g, w)
    assert np.abs(want[0]).max() > 0.1  # real logits, not an all-zero output
    # one graph per stage: the decoder layers share theirs
    assert sorted(k[0] for k in staged.compiler._phases) == ["layout_back", "layout_decoder", "layout_front"]
    assert staged.release() == 3
    again = [t.asnumpy() for t in staged(x)]
    assert all(np.array_equal(a, w) for a, w in zip(again, want))
