"""PaddleOCR-VL parity beyond the generated component tests (tests/matrix/suite.py: vision tower, prefill and cached
decode): the composed vision attention, each native decode route, and the runtime's graph bookkeeping, on the tiny
checkpoint."""

import numpy as np
import pytest
import torch

from ms_ocr.ops import kernels as routes
from tests.helpers.native import kernels_with
from tests.matrix.models import paddle_patches, paddle_prompt, reference_forward
from tests.models.paddleocr_vl.conftest import rel_err

TOL = 1e-4
# (t, h, w) patch grids: wide, tall, square, and two images packed in one sequence
GRIDS = [[(1, 4, 10)], [(1, 12, 4)], [(1, 6, 6)], [(1, 4, 6), (1, 8, 4)]]


def test_vision_tower_composed_attention(tiny_dir, graph_mode, reference):
    """The vision tower with MindSpore's composed attention (the route of machines without a compiler), in
    graphs of its own: the same parity."""
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from ms_ocr.runtime import Buckets
    grids = GRIDS[-1]
    pix = paddle_patches(grids, 4)
    with pytest.MonkeyPatch.context() as mp:
        kernels_with(mp, attention=None, attention_rows=None)
        pipeline = paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64))
        inputs = pipeline.vision_inputs({"image_grid_thw": np.array(grids), "pixel_values": pix})
        kernels = pipeline.runtime.plan.kernels.library
        before = kernels.attention_calls if kernels is not None else 0
        feats = pipeline.runtime.encode_images(inputs).asnumpy()
        assert kernels is None or kernels.attention_calls == before
    with torch.no_grad():
        ref_feats = torch.cat(reference.model.get_image_features(
            torch.tensor(pix), torch.tensor(grids)).pooler_output).numpy()
    assert rel_err(feats, ref_feats) < TOL


def _prepared(pipeline, ids, pos, delta, pix, grids):
    from ms_ocr.runtime import Prepared
    return Prepared(input_ids=ids, position_ids=pos, rope_delta=delta,
                    image_token_mask=ids == pipeline.cfg.image_token_id,
                    vision_inputs=pipeline.vision_inputs({"image_grid_thw": np.array(grids), "pixel_values": pix}))


@pytest.mark.parametrize("route", ["fused_layers", "products", "composed"])
def test_decode_through_native_kernels_matches_reference(tiny_dir, graph_mode, reference, monkeypatch, route):
    """The CPU decode step on each kernel route, against the reference's full forward (cached decode logits and
    greedy tokens): every decoder layer as one native DecodeLayer kernel (ops/decode_layer.py; the default on
    the CPU), the composed layer with its products on the native matrix-vector kernel (ops/linear.py), and
    MindSpore's kernels only (the route of Ascend's graphs and of machines without a compiler). The weight-size
    threshold is lowered so the tiny model's products take the native kernel, as the real head does; the
    library's call counters prove which kernels ran."""
    from ms_ocr.models.paddleocr_vl import SPEC as paddleocr_vl
    from ms_ocr.ops import linear
    from ms_ocr.runtime import Buckets
    monkeypatch.setenv(routes.ROUTES_ENV, "all")  # every route, whatever this ISA level's table routes
    kernels = routes.choose("CPU").library
    assert kernels is not None, "native kernels unavailable (no C++ compiler?)"
    monkeypatch.setattr(linear, "NATIVE_MIN_WEIGHT", 1)
    if route != "fused_layers":
        kernels_with(monkeypatch, decode_layer=None)
    if route == "composed":
        kernels_with(monkeypatch, matmul_t=None)
    pipeline = paddleocr_vl.load(tiny_dir, "CPU", "auto", Buckets(prefill=32, slots=64))  # its own graphs
    cfg = pipeline.cfg
    grids = [(1, 4, 6)]
    pix = paddle_patches(grids, 11)
    prompt = paddle_prompt(cfg, grids, seed=3)
    cont = np.random.default_rng(2).integers(10, 250, 9)
    full = np.concatenate([prompt, cont])
    ref_logits, ref_pos, delta = reference_forward(reference, full, pix, grids, cfg.image_token_id)
    rt, s = pipeline.runtime, len(prompt)
    prep = _prepared(pipeline, prompt, ref_pos[:, :s], delta, pix, grids)
    rt.prefill(prep, pipeline.encode_images(prep), max_new_tokens=len(cont))
    before = kernels.matmul_t_calls, kernels.decode_layer_calls
    for i, tok in enumerate(cont[:-1]):
        step = rt.decode(int(tok), s + i, delta, 3).asnumpy()[0]
        assert rel_err(step, ref_logits[s + i]) < TOL, f"decode step {i}"
        assert np.argmax(step) == np.argmax(ref_logits[s + i])
    steps, layers = len(cont) - 1, cfg.text.num_hidden_layers
    products = {"fused_layers": 1, "products": 7 * layers + 1, "composed": 0}[route]  # per step; 1 = the head
    assert kernels.matmul_t_calls - before[0] == steps * products
    assert kernels.decode_layer_calls - before[1] == (steps * layers if route == "fused_layers" else 0)


def test_shared_layer_steps_compile_once_for_all_layers(pipeline, monkeypatch):
    """Every layer runs through the same compiled graph: a new graph per layer (as happens when weights are
    passed as Parameters or as a tuple) gives each layer its own activation pool (24 GB at full size)."""
    rt = pipeline.runtime
    monkeypatch.setattr(rt.compiler, "keep_requests", 10 ** 9)  # nothing freed: compile caches compare whole
    grids = [(1, 6, 10)]  # a size no other test uses: its first run compiles exactly one graph per step
    inputs = pipeline.vision_inputs({"image_grid_thw": np.array(grids), "pixel_values": paddle_patches(grids, 3)})
    steps = (rt.vision.in_step, rt.vision.block_step)
    before = [set(step.compile_cache) for step in steps]
    rt.encode_images(inputs)
    after = [set(step.compile_cache) for step in steps]
    assert [len(a - b) for a, b in zip(after, before)] == [1, 1]
    rt.encode_images(inputs)
    assert [set(step.compile_cache) for step in steps] == after
    cfg = pipeline.cfg
    prep = _prepared(pipeline, paddle_prompt(cfg, grids), *_positions(pipeline, grids), paddle_patches(grids, 3), grids)
    feats = pipeline.encode_images(prep)
    rt.prefill(prep, feats, 4)
    seen = set(rt.prefill_layer_step.compile_cache)
    rt.prefill(prep, feats, 4)
    assert set(rt.prefill_layer_step.compile_cache) == seen


def test_graphs_of_unused_sizes_are_freed_and_recompile_identically(pipeline, monkeypatch):
    """A page size the last request(s) did not use loses its vision and prefill graphs at the next request's
    prefill; when it comes back it compiles again and gives bit-identical features and logits."""
    from mindspore.nn import cell as cell_module
    rt = pipeline.runtime
    monkeypatch.setattr(rt.compiler, "keep_requests", 1)
    monkeypatch.setattr(rt.compiler, "idle_bytes", 0)  # tiny graphs: otherwise kept (compiler.IDLE_GRAPH_BYTES)
    executor = cell_module._cell_graph_executor

    def request(grids):
        prep = _prepared(pipeline, paddle_prompt(pipeline.cfg, grids), *_positions(pipeline, grids),
                         paddle_patches(grids, 5), grids)
        feats = pipeline.encode_images(prep)
        logits = rt.prefill(prep, feats, 4).asnumpy()
        return feats.asnumpy(), logits, {k: v[0] for k, v in rt.compiler._phases.items() if k[0] == "vision"}

    first = [(1, 10, 14)]  # patch counts no other test uses: 140, then 144 and 96
    before = {k for k in rt.compiler._phases if k[0] == "vision"}
    feats, logits, phases = request(first)
    mine = {k: p for k, p in phases.items() if k not in before}
    assert len(mine) >= 3  # embed, attention-in, block, head
    request([(1, 8, 18)])
    request([(1, 16, 6)])  # the first size was last used two requests ago: freed here
    assert not any(executor.has_compiled(p) for p in mine.values())
    assert not set(mine) & set(rt.compiler._phases)
    compiled = rt.compiler.seconds["vision"]
    again, again_logits, _ = request(first)
    assert rt.compiler.seconds["vision"] > compiled
    np.testing.assert_array_equal(again, feats)
    np.testing.assert_array_equal(again_logits, logits)


def test_vision_graphs_released_before_prefill_give_identical_results(pipeline, monkeypatch):
    """release_vision_graphs (infer's choice for an image whose size does not come back): every vision graph is
    freed once the request's images are encoded, before its prefill; features, prefill logits and decode logits
    are bit-identical to those of kept graphs, and the next request of the size compiles again."""
    from mindspore.nn import cell as cell_module
    rt = pipeline.runtime
    executor = cell_module._cell_graph_executor
    grids = [(1, 6, 14)]  # 84 patches: a size no other test uses
    prep = _prepared(pipeline, paddle_prompt(pipeline.cfg, grids), *_positions(pipeline, grids),
                     paddle_patches(grids, 8), grids)
    s = len(prep.input_ids)

    def request():
        feats = pipeline.encode_images(prep)
        vision = {k: v[0] for k, v in rt.compiler._phases.items() if k[0] == "vision"}
        logits = [rt.prefill(prep, feats, 3).asnumpy()[0]]
        for i, tok in enumerate((17, 42)):
            logits.append(rt.decode(tok, s + i, prep.rope_delta, 3).asnumpy()[0])
        return feats.asnumpy(), np.stack(logits), vision

    feats, logits, kept = request()
    assert kept and all(executor.has_compiled(p) for p in kept.values())
    monkeypatch.setattr(rt.vision, "release_graphs", True)
    compiled = rt.compiler.seconds["vision"]
    for again in (False, True):  # on the kept graphs, which it then frees; then on graphs compiled again
        got_feats, got_logits, vision = request()
        assert not vision  # none left by the time of prefill
        assert not any(executor.has_compiled(p) for p in kept.values())
        assert (rt.compiler.seconds["vision"] > compiled) == again
        np.testing.assert_array_equal(got_feats, feats)
        np.testing.assert_array_equal(got_logits, logits)


def _positions(pipeline, grids):
    from ms_ocr.processing.mrope import mrope_positions
    ids = paddle_prompt(pipeline.cfg, grids)
    types = (ids == pipeline.cfg.image_token_id).astype(np.int64)
    return mrope_positions(types, grids, pipeline.cfg.vision.spatial_merge_size)


def test_cache_is_sized_per_request_in_buckets(pipeline):
    from ms_ocr.runtime import RequestTooLong
    rt = pipeline.runtime  # buckets: prefill 32, slots 64
    assert rt.plan_slots(10, 5) == 64
    assert rt.plan_slots(40, 30) == 128
    assert rt.plan_slots(60, 1) == 64
    with pytest.raises(RequestTooLong, match="max_position_embeddings"):
        rt.plan_slots(100, pipeline.cfg.text.max_position_embeddings)
