"""DeepSeek MoE decoder (shared by DeepSeek-OCR v1 and v2) against transformers' DeepseekOcr2TextModel on a tiny
config: per-expert checkpoint tensors stacked by the loader, prefill logits (host-dispatched experts) and
cached decode steps (experts gathered in the graph), the exported graphs' path with every expert."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import mindspore as ms
from mindspore import Tensor, nn

from ms_ocr.convert.loader import load_weights
from ms_ocr.convert.table import RenameTable
from ms_ocr.nn import CausalDecoder, MultiAxisRotary
from ms_ocr.nn.moe import MoE, route
from ms_ocr.nn.vlm import ViewsModel
from ms_ocr.ops import bind, choose
from ms_ocr.plan import Plan
from ms_ocr.runtime import Buckets, Prepared, VLMRuntime
from ms_ocr.runtime.host_step import ENV as HOST_STEP
from tests.helpers.parity import randomize_, rel_err

TEXT = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=3,
            n_shared_experts=2, routed_scaling_factor=1.0, rms_norm_eps=1e-6, max_position_embeddings=512,
            mlp_layer_types=["dense", "sparse", "sparse"], rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
STACKS = [(r"^(model\.layers\.\d+\.mlp\.experts)\.(?P<index>\d+)\.(gate_proj|up_proj|down_proj)\.weight$", r"\1.\3")]


class TextOnly(ViewsModel):
    """The decoder alone: a model without ViT layers."""

    def __init__(self, cfg):
        super().__init__(cfg)
        t = cfg.text
        moe = lambda i: (MoE(t.hidden_size, t.moe_intermediate_size, t.n_routed_experts, t.num_experts_per_tok,
                             t.n_shared_experts, t.routed_scaling_factor) if t.mlp_layer_types[i] == "sparse"
                         else None)
        self.model = CausalDecoder(t, MultiAxisRotary(t.head_dim, 10000.0), ffn=moe)


def _text_config(spec):
    return SimpleNamespace(**{k: v for k, v in spec.items() if k != "rope_parameters"}, head_dim=16,
                           hidden_act="silu", tie_word_embeddings=False)


def build(spec):
    """(reference text model, lm_head, our runtime, checkpoint tensors) for the text config `spec`."""
    from transformers import DeepseekOcr2TextConfig, DeepseekOcr2TextModel

    ref = randomize_(DeepseekOcr2TextModel(DeepseekOcr2TextConfig(**spec)).eval(), 3)
    head = torch.randn(spec["vocab_size"], spec["hidden_size"], generator=torch.Generator().manual_seed(4)) * 0.2
    # the checkpoint layout: one tensor per expert (transformers stacks them in memory as gate_up_proj)
    tensors = [("lm_head.weight", head.numpy(), "F32")]
    for name, p in ref.state_dict().items():
        arr = p.detach().numpy()
        if name.endswith("experts.gate_up_proj"):
            inter = arr.shape[1] // 2
            for e in range(arr.shape[0]):
                base = f"model.{name[:-len('gate_up_proj')]}{e}"
                tensors += [(f"{base}.gate_proj.weight", arr[e, :inter], "F32"),
                            (f"{base}.up_proj.weight", arr[e, inter:], "F32")]
        elif name.endswith("experts.down_proj"):
            for e in range(arr.shape[0]):
                tensors.append((f"model.{name[:-len('down_proj')]}{e}.down_proj.weight", arr[e], "F32"))
        else:
            tensors.append((f"model.{name}", arr, "F32"))
    kernels = choose("CPU")
    net = bind(TextOnly(SimpleNamespace(text=_text_config(spec))), kernels)
    load_weights(net, tensors, RenameTable(stacks=STACKS), source="tiny")
    plan = Plan("CPU", kernels, ms.float32, kv_dtype=ms.float32)
    return ref, head, VLMRuntime(net, plan, 512, buckets=Buckets(prefill=16, slots=64)), tensors


@pytest.fixture(scope="module")
def setup(graph_mode):
    return build(TEXT)


def test_loader_stacks_experts_and_reports_missing_slices(setup):
    from ms_ocr.config_utils import CheckpointError
    *_, tensors = setup
    dropped = [t for t in tensors if t[0] != "model.layers.2.mlp.experts.5.up_proj.weight"]
    with pytest.raises(CheckpointError, match=r"up_proj\[5\]"):
        load_weights(TextOnly(SimpleNamespace(text=_text_config(TEXT))), dropped, RenameTable(stacks=STACKS),
                     source="tiny")


def test_prefill_and_cached_decode_match_reference(setup):
    _check_prefill_and_decode(*setup[:3])


def test_decode_with_dense_layers_after_moe_layers(graph_mode, monkeypatch):
    """mlp_layer_types is a free list in transformers' config: the host step (runtime/host_step.py) runs MoE and
    dense layers in any order in its one call; on the host-routed path a dense layer after an MoE layer runs that
    MoE layer's experts in the dense layer's graph call, and a dense last layer ends the token with the head alone
    (the hub's DeepSeek layouts, dense layers first, take neither)."""
    ref, head, rt, _ = build(dict(TEXT, num_hidden_layers=4, mlp_layer_types=["sparse", "dense", "sparse", "dense"]))
    kn = rt.plan.kernels
    monkeypatch.setenv(HOST_STEP, "1")
    _check_prefill_and_decode(ref, head, rt)
    assert rt.host_step.serves(rt.cache, 1) == (kn.decode_layer is not None and kn.moe_experts is not None)
    monkeypatch.setenv(HOST_STEP, "0")
    rt.moe.decode_on_host = True  # the host-routed path (the default where MoeExperts is not routed)
    _check_prefill_and_decode(ref, head, rt)
    assert set(rt.moe.layer_steps) == {(False, "moe"), (True, "dense"), (False, "head")}


def _check_prefill_and_decode(ref, head, rt):
    ids = np.random.default_rng(0).integers(0, 300, 37)
    cont = np.random.default_rng(1).integers(0, 300, 9)
    full = np.concatenate([ids, cont])
    with torch.no_grad():
        want = (ref(input_ids=torch.tensor(full)[None]).last_hidden_state[0] @ head.T).numpy()
    s = len(ids)
    prep = Prepared(input_ids=ids, position_ids=np.arange(s)[None], rope_delta=0,
                    image_token_mask=np.zeros(s, bool))
    assert rel_err(rt.full_logits(prep, None), want[:s]) < 1e-4
    last = rt.prefill(prep, None, max_new_tokens=len(cont)).asnumpy()[0]
    assert rel_err(last, want[s - 1]) < 1e-4
    for i, tok in enumerate(cont[:-1]):
        step = rt.decode(int(tok), s + i, 0, 1).asnumpy()[0]
        assert rel_err(step, want[s + i]) < 1e-4, f"decode step {i}"
        assert np.argmax(step) == np.argmax(want[s + i])


class _DenseMoE(nn.Cell):
    def __init__(self, moe):
        super().__init__()
        self.moe = moe

    def construct(self, h):
        weights, ids = route(self.moe.kernels, h, self.moe.gate.weight, self.moe.top_k, self.moe.scaling)
        return self.moe.dense_experts(h, weights, ids) + self.moe.shared_experts(h)


def test_dense_expert_path_matches_reference(setup):
    """The exported graphs' MoE path (every expert on every token, unselected ones weighted 0) for prompt-sized
    and decode-sized token counts."""
    ref, _, rt, _ = setup
    for i in (1, 2):
        dense = _DenseMoE(rt.model.model.layers[i].mlp)
        for t in (23, 1):
            x = np.random.default_rng(t).standard_normal((t, TEXT["hidden_size"])).astype(np.float32)
            with torch.no_grad():
                want = ref.layers[i].mlp(torch.tensor(x)[None])[0].numpy()
            got = dense(Tensor(x)).asnumpy()
            assert rel_err(got, want) < 1e-5, (i, t)


def test_expert_views_follow_a_replaced_stack(setup):
    """The host-routed decode's per-expert views share the stacked Parameter's buffer, and are made again when
    set_data replaces it (a view kept from before would read freed memory)."""
    from mindspore import Tensor
    rt = setup[2]
    moe = rt.model.text_layers()[1].mlp
    stack = moe.experts.up_proj
    before = rt.moe.expert_views(moe)
    assert rt.moe.expert_views(moe)[1][2] is before[1][2]  # kept while the buffer stays
    assert before[1][2].asnumpy().ctypes.data == stack.asnumpy()[2].ctypes.data
    values = stack.asnumpy().copy()
    stack.set_data(Tensor(values * 2))
    try:
        after = rt.moe.expert_views(moe)
        assert after[1][2] is not before[1][2]
        assert after[1][2].asnumpy().ctypes.data == stack.asnumpy()[2].ctypes.data
        np.testing.assert_array_equal(after[1][2].asnumpy(), values[2] * 2)
    finally:
        stack.set_data(Tensor(values))
    np.testing.assert_array_equal(rt.moe.expert_views(moe)[1][5].asnumpy(), values[5])
