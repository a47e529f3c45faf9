"""A bf16 checkpoint on the CPU keeps its text and ViT-layer weights in bf16 (device.bf16_resident: the native
decode kernels read them as bf16, the prefill and vision graphs widen them per layer) and computes bit for bit what
the fp32 path computes on the same checkpoint: image features, prefill logits and greedy decode logits, one sequence
and a batch, for PaddleOCR-VL, HunyuanOCR and DeepSeek-OCR-2 (tiny bf16 checkpoints; DeepSeek's MoE layers keep
router, stacked experts and shared experts in bf16, widened next to each product; its vision weights stay fp32).
Bit for bit with the AMX tiles' exact products off (MS_OCR_AMX=0); with them (GemmAmx, on a CPU with AMX) the
products of many rows are fp32 products summed in another order: within fp32 rounding, the same greedy tokens."""

import numpy as np
import pytest
import mindspore as ms

from ms_ocr.ops import kernels as routes
from ms_ocr.ops import linear
from ms_ocr.runtime import Buckets
from tests.helpers.native import needs_compiler
from bench.pages import text_page
from tests.helpers.tiny_bf16 import BF16_MODELS, tiny_bf16_model

STEPS = 6


def _load_pair(request, amx="0"):
    """The two pipelines, their kernels chosen with MS_OCR_AMX=amx (None: unset)."""
    package, folder, prompt = tiny_bf16_model(request.param, request)
    buckets = Buckets(prefill=32, slots=64)
    with pytest.MonkeyPatch.context() as mp:
        if amx is None:
            mp.delenv(routes.AMX_ENV, raising=False)
        else:
            mp.setenv(routes.AMX_ENV, amx)
        return package.load(folder, "CPU", "auto", buckets), package.load(folder, "CPU", "fp32", buckets), prompt


@pytest.fixture(scope="module", params=BF16_MODELS)
def pair(request, graph_mode):
    """(bf16-resident pipeline, fp32 pipeline, prompt, the fixture request) of one tiny bf16 checkpoint."""
    return (*_load_pair(request), request)


def _same(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def _greedy(pipe, prep, feats):
    """Prefill logits and STEPS greedy decode steps' logits of one sequence."""
    rt = pipe.runtime
    out = [rt.prefill(prep, feats, max_new_tokens=STEPS + 1).asnumpy()[0]]
    s = prep.input_ids.shape[0]
    for i in range(STEPS):
        out.append(rt.decode(int(np.argmax(out[-1])), s + i, prep.rope_delta, pipe.num_pos_axes).asnumpy()[0])
    return out


@needs_compiler
def test_weights_stay_bf16_where_the_kernels_read_them(pair):
    bf, fp = pair[:2]
    assert bf.runtime.plan.kernels.decode_layer is not None, "this level routes no native decode layer"
    model = bf.runtime.model
    names = model.bf16_weight_names()
    params = {p.name: p for p in model.get_parameters()}
    assert names and model.widen_embeddings
    assert "model.layers.0.self_attn.q_proj.weight" in names and "model.embed_tokens.weight" in names
    if pair[3].param == "deepseek-ocr2":  # MoE layers: router, stacked experts, shared experts; no ViT layers
        moe = [layer for layer in model.text_layers() if layer.moe]
        assert moe and all({p.name for p in layer.get_parameters() if not p.name.endswith("_cache")} <= names
                           for layer in moe)
        assert moe[0].mlp.experts.gate_proj.dtype == ms.bfloat16 and moe[0].mlp.gate.weight.dtype == ms.bfloat16
    else:
        vision = {p.name for p in model.vision_layers()[0].get_parameters()}
        assert vision and vision <= names  # the ViT layers' weights too (widened once per layer as they run)
    for name, p in params.items():
        if name.endswith("_cache"):
            continue
        assert p.dtype == (ms.bfloat16 if name in names else ms.float32), name
    assert all(p.dtype == ms.float32 for p in fp.runtime.model.get_parameters())
    assert not fp.runtime.model.widen_embeddings


@needs_compiler
@pytest.mark.parametrize("native_head", [False, True])
def test_one_sequence_bit_identical_to_fp32(pair, native_head, monkeypatch):
    """Vision features, prefill logits and greedy decode logits equal the fp32 path's bit for bit, the head on
    MatMul over a widened copy (the tiny head is below the native thresholds) or on the native kernel (both
    thresholds lowered: for DeepSeek every product of <= 8 rows, experts and attention, in both paths)."""
    bf, fp, prompt = pair[:3]
    if native_head:  # pipelines of their own: graphs compiled with the lowered thresholds
        monkeypatch.setattr(linear, "NATIVE_MIN_WEIGHT", 1)
        monkeypatch.setattr(linear, "NATIVE_MIN_WEIGHT_BF16", 1)
        bf, fp, prompt = _load_pair(pair[3])
    kernels = bf.runtime.plan.kernels.library
    prep, _ = fp.prepare([text_page(84, 112, f"row {0}")], prompt)
    feats_fp, feats_bf = fp.encode_images(prep), bf.encode_images(prep)
    assert _same(feats_bf.asnumpy(), feats_fp.asnumpy())
    want = _greedy(fp, prep, feats_fp)
    before = kernels.decode_layer_calls, kernels.matmul_t_calls
    got = _greedy(bf, prep, feats_bf)
    layers = len([layer for layer in bf.runtime.model.text_layers() if not layer.moe])
    assert layers and kernels.decode_layer_calls - before[0] == STEPS * layers  # decode ran the bf16 kernel
    if native_head and pair[3].param == "deepseek-ocr2":  # every product of <= 8 rows: experts and attention too
        assert kernels.matmul_t_calls - before[1] > STEPS + 1
    elif native_head:
        assert kernels.matmul_t_calls - before[1] == STEPS + 1  # the head of prefill and of every decode step
    for i, (g, w) in enumerate(zip(got, want)):
        assert _same(g, w), f"step {i}"


@needs_compiler
def test_amx_products_within_fp32_rounding_of_the_fp32_path(pair, monkeypatch):
    """With the AMX tiles' exact products routed (GemmAmx; from 9 rows here, so the tiny prompt and image take
    them), vision features, prefill and decode logits stay within fp32 rounding of the fp32 path, the same greedy
    tokens; on a CPU without the tiles nothing routes them and the bits are the fp32 path's."""
    monkeypatch.setattr(linear, "AMX_MIN_ROWS", linear.NATIVE_MAX_ROWS + 1)
    bf, fp, prompt = _load_pair(pair[3], amx=None)
    kernels = bf.runtime.plan.kernels.library
    tiles = bf.runtime.plan.kernels.amx_products is not None
    assert tiles == (kernels.amx_products and "amx_products" in routes.native_routes(kernels.isa_level))
    prep, _ = fp.prepare([text_page(84, 112, f"row {0}")], prompt)
    before = kernels.gemm_amx_calls
    feats_fp, feats_bf = fp.encode_images(prep), bf.encode_images(prep)
    want, got = _greedy(fp, prep, feats_fp), _greedy(bf, prep, feats_bf)
    assert (kernels.gemm_amx_calls > before) is tiles
    pairs = [(feats_bf.asnumpy(), feats_fp.asnumpy())] + list(zip(got, want))
    for i, (g, w) in enumerate(pairs):
        if not tiles:
            assert _same(g, w), f"output {i}"
        assert np.abs(g - w).max() <= 1e-5 * np.abs(w).max(), f"output {i}"
    assert [int(np.argmax(g)) for g in got] == [int(np.argmax(w)) for w in want]
    if tiles and pair[3].param != "deepseek-ocr2":  # (its vision weights stay fp32)
        assert not _same(*pairs[0])  # the features did take the tiles: another summation order


@needs_compiler
@pytest.mark.parametrize("batch", [3, 9])
def test_batch_decode_bit_identical_to_fp32(pair, batch):
    """Sequences prefilled and decoded together (the batch engine's runtime calls): 3 through the native kernels,
    9 (more than DecodeLayer takes) through the composed layers, whose graphs widen the bf16 weights."""
    bf, fp, prompt = pair[:3]
    preps = [fp.prepare([text_page(84, 112, f"row {i % 4}")], prompt)[0] for i in range(batch)]
    results = []
    for pipe in (bf, fp):
        rt = pipe.runtime
        slots = max(rt.plan_slots(p.input_ids.shape[0], STEPS + 1) for p in preps)
        rt.reset_cache(len(preps), slots)
        feats = [pipe.encode_images(p) for p in preps]
        logits = [rt.prefill_batch(preps, feats, list(range(len(preps))), slots).asnumpy()]
        pos = np.array([p.input_ids.shape[0] for p in preps])
        for i in range(STEPS):
            toks = [int(t) for t in np.argmax(logits[-1], -1)]
            logits.append(rt.decode_batch(toks, pos + i, [p.rope_delta for p in preps], pipe.num_pos_axes).asnumpy())
        results.append(logits)
    for i, (g, w) in enumerate(zip(*results)):
        assert _same(g, w), f"step {i}"
