"""DeepSeek-OCR-2 vision (SAM -> query encoder -> projector -> [tiles, global, view_seperator]) and the MoE
decoder inside the full model, against transformers' DeepseekOcr2ForConditionalGeneration (tiny config)."""

import numpy as np
import pytest
import torch
import mindspore as ms

from ms_ocr.convert.loader import load_weights
from ms_ocr.models.deepseek_ocr2.config import DeepseekOCR2Config
from ms_ocr.models.deepseek_ocr2.convert import name_table
from ms_ocr.models.deepseek_ocr2.model import DeepseekOCR2Model
from ms_ocr.plan import Plan
from ms_ocr.runtime import Buckets, Prepared, VisionInputs, VLMRuntime
from ms_ocr.runtime.host_step import ENV as HOST_STEP
from tests.helpers.native import bound
from tests.helpers.parity import rel_err
from tests.helpers.tiny_deepseek import TILE, GLOBAL, tiny_model, view_inputs


@pytest.fixture(scope="module")
def pair(graph_mode, tmp_path_factory):
    ref = tiny_model(seed=2)
    folder = tmp_path_factory.mktemp("ds2_weights")
    ref.save_pretrained(folder)  # hub names, one tensor per expert
    from ms_ocr.convert.safetensors_io import iter_checkpoint
    cfg = DeepseekOCR2Config.from_dict(ref.config.to_dict())
    net = bound(DeepseekOCR2Model(cfg))
    load_weights(net, iter_checkpoint(str(folder)), name_table(cfg), source="tiny")
    plan = Plan("CPU", net.kernels, ms.float32, kv_dtype=ms.float32)
    return ref, VLMRuntime(net, plan, 2048, buckets=Buckets(prefill=32, slots=64)), cfg


@pytest.mark.parametrize("tiles", [0, 2, 3])
def test_image_features_match_reference(tiles, pair):
    ref, rt, cfg = pair
    rng = np.random.default_rng(tiles)
    glob = rng.standard_normal((1, 3, GLOBAL, GLOBAL)).astype(np.float32)
    local = rng.standard_normal((tiles, 3, TILE, TILE)).astype(np.float32) if tiles else None
    with torch.no_grad():
        want = ref.model.get_image_features(torch.tensor(glob), torch.tensor(local) if tiles else None,
                                            [tiles]).pooler_output[0].numpy()
    item = VisionInputs(embed=view_inputs(rt.model.vision.sam_model, local, glob), head=())
    got = rt.encode_images([item]).asnumpy()
    assert got.shape == want.shape
    assert rel_err(got, want) < 1e-4


def test_multimodal_prefill_and_decode_logits(pair, monkeypatch):
    ref, rt, cfg = pair
    rng = np.random.default_rng(9)
    glob = rng.standard_normal((1, 3, GLOBAL, GLOBAL)).astype(np.float32)
    local = rng.standard_normal((2, 3, TILE, TILE)).astype(np.float32)
    n_img = 2 * (TILE // 64) ** 2 + (GLOBAL // 64) ** 2 + 1
    prompt = np.array([cfg.text.bos_token_id] + [cfg.image_token_id] * n_img + list(rng.integers(5, 300, 6)))
    cont = rng.integers(5, 300, 9)
    full = np.concatenate([prompt, cont])
    with torch.no_grad():
        want = ref(input_ids=torch.tensor(full)[None], pixel_values=torch.tensor(glob),
                   pixel_values_local=torch.tensor(local), num_local_patches=[2]).logits[0].numpy()
    s = len(prompt)
    item = VisionInputs(embed=view_inputs(rt.model.vision.sam_model, local, glob), head=())
    prep = Prepared(input_ids=prompt, position_ids=np.arange(s)[None], rope_delta=0,
                    image_token_mask=prompt == cfg.image_token_id, vision_inputs=[item])
    feats = rt.encode_images(prep.vision_inputs)
    assert rel_err(rt.full_logits(prep, feats), want[:s]) < 1e-4
    last = rt.prefill(prep, feats, max_new_tokens=len(cont)).asnumpy()[0]
    assert rel_err(last, want[s - 1]) < 1e-4
    # one sequence on the CPU: the host step (runtime/host_step.py) where the native kernels serve it; else the
    # whole-model graph with the native MoeExperts where it is routed, else layer graphs with the experts routed on
    # the host; all three run here (the graphs with the host step switched off)
    monkeypatch.setenv(HOST_STEP, "0")
    assert rt.moe.decode_on_host == (rt.plan.kernels.moe_experts is None)
    rt.moe.decode_on_host = True
    steps = [rt.moe.layer_step(*kind) for kind in ((False, "moe"), (True, "moe"), (True, "head"))]
    before = [len(step.compile_cache) for step in steps]
    for i, tok in enumerate(cont[:-1]):
        whole = _whole_graph_decode(rt, int(tok), s + i)  # writes the same cache rows as the step below
        step = rt.decode(int(tok), s + i, 0, 1).asnumpy()[0]
        assert rel_err(step, want[s + i]) < 1e-4, f"decode step {i}"
        assert rel_err(whole, want[s + i]) < 1e-4, f"whole-graph decode step {i}"
        monkeypatch.setenv(HOST_STEP, "1")
        native = rt.plan.kernels.moe_experts is not None and rt.plan.kernels.decode_layer is not None
        assert rt.host_step.serves(rt.cache, 1) == native  # wherever the native kernels serve the whole step
        host = rt.decode(int(tok), s + i, 0, 1).asnumpy()[0]
        assert rel_err(host, want[s + i]) < 1e-4, f"host step {i}"
        monkeypatch.setenv(HOST_STEP, "0")
    # every MoE layer ran through one shared graph (weights and KV caches as inputs), not a graph per layer: the
    # first MoE layer through the (no experts, "moe") step, each later one through the (experts, "moe") one, which
    # also runs the experts of the layer before it (the last layer's experts run with the head)
    assert sum(layer.moe for layer in rt.model.text_layers()) > 1
    assert [len(step.compile_cache) - b for step, b in zip(steps, before)] == [1, 1, 1]


def _whole_graph_decode(rt, token, cache_pos):
    """The whole-model decode graph (experts gathered in the graph), as batched decode and export use it."""
    rt.moe.decode_on_host = False
    try:
        return rt.decode(token, cache_pos, 0, 1).asnumpy()[0]
    finally:
        rt.moe.decode_on_host = True
