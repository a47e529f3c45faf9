"""runtime/host_step.py: the decode step's native kernels called from the host give the compiled DecodeStep's logits
and tokens (one and several rows, fp32 and bf16 caches, q/k-normed HunyuanOCR, DeepSeek-OCR-2's MoE layers, int8, bf16
checkpoints), the graph is not compiled for the steps it serves, and it steps aside where the graph's kernels would not
serve the whole step."""

import dataclasses

import numpy as np
import pytest

from ms_ocr.runtime import Buckets
from ms_ocr.runtime.host_step import ENV
from bench.pages import page
from tests.helpers.parity import rel_err

STEPS = 6
SIZES = [(96, 128), (200, 56), (48, 160)]


def _decode(pipe, pages, host, monkeypatch, steps=STEPS, prompt="OCR:"):
    """Greedy tokens and logits [B, steps + 1, V] of `pages` prefilled together and decoded as one batch, by the
    host step (`host`) or the compiled one; which ran is checked by what was compiled and called (the native
    DecodeLayer for every layer the host step runs, for the dense ones the graph runs; the routed experts of every MoE
    layer either way)."""
    monkeypatch.setenv(ENV, "1" if host else "0")
    rt = pipe.runtime
    preps = [pipe.prepare([p], prompt)[0] for p in pages]
    feats = [pipe.encode_images(p) for p in preps]
    lengths = np.array([p.input_ids.shape[0] for p in preps])
    slots = max(rt.plan_slots(int(n), steps + 1) for n in lengths)
    rt.reset_cache(len(preps), slots)
    logits = [rt.prefill_batch(preps, feats, list(range(len(preps))), slots).asnumpy()]
    graph = rt.decode_steps[False]
    compiled = sum(1 for key in rt.compiler._phases if key[1] == id(graph))
    lib = rt.model.kernels.library
    calls, experts = lib.decode_layer_calls, lib.moe_experts_calls
    for i in range(steps):
        tokens = [int(t) for t in np.argmax(logits[-1], -1)]
        logits.append(rt.decode_batch(tokens, lengths + i, [p.rope_delta for p in preps],
                                      pipe.num_pos_axes).asnumpy())
    moe = sum(1 for layer in rt.model.text_layers() if layer.moe)
    dense = len(rt.model.text_layers()) - moe
    assert lib.decode_layer_calls - calls == steps * (dense + (moe if host else 0))
    assert lib.moe_experts_calls - experts == steps * moe
    ran_graph = sum(1 for key in rt.compiler._phases if key[1] == id(graph)) > compiled or not host
    assert rt.host_step.serves(rt.cache, len(pages)) is host
    return np.stack(logits, 1), ran_graph


def _same(pipe, monkeypatch, pages, tol=1e-6, prompt="OCR:"):
    host, graph_compiled_h = _decode(pipe, pages, True, monkeypatch, prompt=prompt)
    graph, _ = _decode(pipe, pages, False, monkeypatch, prompt=prompt)
    assert not graph_compiled_h
    assert rel_err(host, graph) < tol, rel_err(host, graph)
    assert np.array_equal(np.argmax(host, -1), np.argmax(graph, -1))
    return host, graph


@pytest.fixture(scope="module")
def paddle(tiny_dir, graph_mode):
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    return paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64))


def test_paddleocr_vl_host_step_gives_the_graphs_logits(paddle, monkeypatch):
    pages = [page(w, h, i) for i, (w, h) in enumerate(SIZES)]
    _same(paddle, monkeypatch, pages[:1])
    _same(paddle, monkeypatch, pages)  # three rows at three positions (MRoPE deltas differ)


def test_bf16_caches(tiny_dir, graph_mode, monkeypatch):
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    pipe = paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64), kv_cache_dtype="bf16")
    _same(pipe, monkeypatch, [page(w, h, 5 + i) for i, (w, h) in enumerate(SIZES[:2])])


def test_hunyuan_qk_norms_and_xd_rope(hunyuan_checkpoint, graph_mode, monkeypatch):
    from ms_ocr.models.hunyuan_vl import SPEC as hunyuan_vl
    pipe = hunyuan_vl.load(hunyuan_checkpoint(), "CPU", "auto", Buckets(prefill=32, slots=64))
    assert pipe.runtime.model.text_layers()[0].self_attn.qk_norm
    _same(pipe, monkeypatch, [page(w, h, 9 + i) for i, (w, h) in enumerate(SIZES[:2])])


def test_int8(tiny_dir, graph_mode, monkeypatch):
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    pipe = paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64), quantize="int8")
    assert pipe.runtime.model.text_layers()[0].quantized
    _same(pipe, monkeypatch, [page(96, 128, 3)])


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory, graph_mode):
    from tests.helpers.tiny_deepseek import make_tiny_checkpoint
    return make_tiny_checkpoint(str(tmp_path_factory.mktemp("ds2_host_step")))


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_deepseek_moe_layers(deepseek, monkeypatch, quantize):
    """DeepSeek-OCR-2 (a dense first layer, then MoE layers: router, shared and routed experts in the layer's own
    region; int8 routed stacks under --quantize int8), one row and two rows at different positions."""
    from ms_ocr.models.deepseek_ocr2 import SPEC as deepseek_ocr2
    pipe = deepseek_ocr2.load(deepseek, "CPU", "auto", Buckets(prefill=32, slots=64), quantize=quantize)
    layers = pipe.runtime.model.text_layers()
    assert [layer.moe for layer in layers] == [False, True, True]
    assert all(layer.mlp.quantized == (quantize == "int8") for layer in layers[1:])
    prompt = deepseek_ocr2.tasks["ocr"]
    host, _ = _same(pipe, monkeypatch, [page(96, 128, 11)], prompt=prompt)
    assert len(set(np.argmax(host, -1).ravel().tolist())) > 1  # tokens that differ: the steps are not all alike
    _same(pipe, monkeypatch, [page(w, h, 12 + i) for i, (w, h) in enumerate(SIZES[:2])], prompt=prompt)


def test_moe_layers_the_host_step_leaves_to_the_graph(deepseek, monkeypatch):
    from ms_ocr.models.deepseek_ocr2 import SPEC as deepseek_ocr2
    from ms_ocr.runtime.host_step import refusal
    rt = deepseek_ocr2.load(deepseek, "CPU", "auto", Buckets(prefill=32, slots=64)).runtime
    rt.reset_cache(1, 64)
    assert refusal(rt.model, rt.plan, rt.cache) is None and rt.host_step.serves(rt.cache, 1)
    mlp = rt.model.text_layers()[1].mlp
    monkeypatch.setattr(mlp, "dense", True)  # the exported graph's every-expert form
    assert refusal(rt.model, rt.plan, rt.cache) == "every expert for every token (the exported graph's form)"
    monkeypatch.setattr(mlp, "dense", False)
    tiles = dataclasses.replace(rt.model.kernels, amx_decode=("a tiles kernel",))  # --dtype bf16 on an AMX CPU
    monkeypatch.setattr(rt.model, "kernels", tiles)
    assert refusal(rt.model, rt.plan, rt.cache) == "an MoE decoder with --dtype bf16 on the AMX tiles"


def test_bf16_products(tiny_dir, graph_mode, monkeypatch):
    """--dtype bf16 (a bf16 checkpoint's weights kept bf16; on a CPU with AMX, DecodeLayerBf16 and the tiles)."""
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    pipe = paddleocr_vl.load(tiny_dir, "CPU", "bf16", Buckets(prefill=32, slots=64))
    _same(pipe, monkeypatch, [page(w, h, 7 + i) for i, (w, h) in enumerate(SIZES[:2])])


def test_switched_off_or_unserved_the_graph_runs(paddle, monkeypatch):
    rt = paddle.runtime
    rt.reset_cache(1, 64)
    assert rt.host_step.serves(rt.cache, 1) and rt.host_step.serves(rt.cache, 8)
    assert not rt.host_step.serves(rt.cache, 9)  # the kernel's 8 rows
    monkeypatch.setenv(ENV, "0")
    rt.reset_cache(1, 64)
    assert not rt.host_step.serves(rt.cache, 1) and rt.host_step.refused == f"{ENV}=0"
    monkeypatch.setenv(ENV, "1")
    rt.reset_cache(1, 64, host_writes=False)  # caches the graphs write (Ascend's, the exported graph's)
    assert not rt.host_step.serves(rt.cache, 1)


def test_rope_tables_are_bounded_and_exact(paddle, monkeypatch):
    """A long-lived process's rope tables: at most ROPE_BLOCKS_KEPT blocks of positions, and a block computed again
    after it was dropped gives the same rows."""
    from ms_ocr.runtime import host_step
    monkeypatch.setattr(host_step, "ROPE_BLOCKS_KEPT", 3)
    hs = paddle.runtime.host_step
    hs._rope.clear()
    first = hs._rope_rows(np.array([5, 300]), 3)
    for block in range(2, 6):
        hs._rope_rows(np.array([block * host_step.ROPE_BLOCK + 1]), 3)
        assert len(hs._rope) <= 3
    assert (3, 0) not in hs._rope
    again = hs._rope_rows(np.array([5, 300]), 3)
    assert np.array_equal(first[0], again[0]) and np.array_equal(first[1], again[1])
    assert not np.array_equal(first[0][0], first[0][1])
