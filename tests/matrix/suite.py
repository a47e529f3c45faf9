# Over 500 lines: the one module every tests/matrix/test_<model>.py star-imports (see below); kept whole on purpose.
"""The checkpoint-layout matrix: every variant of tests/matrix/models.py gives transformers' greedy tokens end to
end through the CLI, and its first logits (the CLI's precision dump) within 1e-4 of max|logit|.

The tests run from one small module per model (tests/matrix/test_<model>.py: `MODEL = ...` and a star import of
this file), so that the test runner's workers, which take whole files, share the models out."""

import gc
import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from tests.cli_util import ROOT, run_module
from bench.pages import text_page
from tests.helpers.quant import quantized_params, write_dequantised_copy
from tests.matrix import layouts
from tests.matrix.models import MATRICES, reference_forward

NEW_TOKENS = 10


def pytest_generate_tests(metafunc):
    """Each importing module's MODEL: its variants (the slow ones marked) and the model itself."""
    model = metafunc.module.MODEL
    if "variant" in metafunc.fixturenames:
        metafunc.parametrize("model,variant", [
            pytest.param(model, variant, id=variant, marks=[pytest.mark.slow] if spec.get("slow") else [])
            for variant, spec in MATRICES[model].variants.items()])
    elif "full_size_model" in metafunc.fixturenames:  # models with a full-size description only
        metafunc.parametrize("full_size_model", [model] if MATRICES[model].full_size else [])
    elif "component_model" in metafunc.fixturenames:  # models with a components description only
        components = MATRICES[model].components
        if "host_cache" in metafunc.fixturenames:
            metafunc.parametrize("component_model,chunk,host_cache",
                                 [(model, c, h) for c, h in components["decode_variants"]] if components else [],
                                 ids=lambda v: v if isinstance(v, str) else str(v))
        else:  # the vision test: every grid at every query block size
            metafunc.parametrize("component_model,grids,chunk",
                                 [(model, g, c) for g in GRIDS for c in (512, 7)] if components else [],
                                 ids=lambda v: v if isinstance(v, str) else
                                 "+".join(f"{h}x{w}" for _, h, w in v) if isinstance(v, list) else str(v))
    elif "g64_refused_model" in metafunc.fixturenames:  # models whose tiny matrices int8-g64 cannot group
        own = MATRICES[model].reference_model is not None
        metafunc.parametrize("g64_refused_model", [model] if own and model not in G64_MODELS else [])
    elif "bf16_model" in metafunc.fixturenames:  # the reduced-precision gates: models with a transformers class
        own = MATRICES[model].reference_model is not None  # (DeepSeek-OCR v1's: test_v1_reduced_precision.py)
        if "head" in metafunc.fixturenames:  # int8 modes over the head kinds the model's variants have
            cases = [(model, q, h) for q, h in INT8_CASES if own and _head_variant(model, h) is not None
                     and (q != "int8-g64" or model in G64_MODELS)]
            metafunc.parametrize("bf16_model,quantize,head", cases, ids=[f"{m}-{q}-{h}" for m, q, h in cases])
        else:
            metafunc.parametrize("bf16_model", [model] if own else [])
    elif "neighbour" in metafunc.fixturenames:
        metafunc.parametrize("model,neighbour", [(model, n) for n in MATRICES[model].neighbours],
                             ids=list(MATRICES[model].neighbours))
    elif "model" in metafunc.fixturenames:
        metafunc.parametrize("model", [model])


@pytest.fixture(scope="session")
def matrix_images(tmp_path_factory):
    """Image files by (width, height): a light page with dark text rows (pages.text_page)."""
    folder = tmp_path_factory.mktemp("matrix_images")
    made = {}

    def get(size):
        if isinstance(size, str):  # "golden:<view>": a stored input view of tests/data/deepseek_ocr_v1
            from tests.helpers.golden_v1 import golden
            path = folder / f"{size[7:]}.png"
            Image.fromarray(golden()[f"in.{size[7:]}"][0].transpose(1, 2, 0)).save(path)
            return str(path)
        if size not in made:
            w, h = size
            path = folder / f"img_{w}x{h}.png"
            text_page(w, h, "12.50 EUR").save(path)
            made[size] = str(path)
        return made[size]

    return get


@pytest.fixture(scope="session")
def matrix_checkpoint(tmp_path_factory):
    """Factory: (model, variant) -> folder built once per session (the base layout, then the layout keys)."""
    built = {}

    def get(model, variant):
        if (model, variant) not in built:
            spec = MATRICES[model].variants[variant]
            folder = str(tmp_path_factory.mktemp(f"{model}_{variant}"))
            MATRICES[model].build(folder, spec["layout"], **spec.get("build", {}))
            built[model, variant] = layouts.apply(folder, spec)
        return built[model, variant]

    return get


def cli_run(matrix, spec, folder, image_paths, prompt, dump=None):
    mode = ("--mode", spec["mode"]) if "mode" in spec else ()
    dump_args = ("--dump", dump) if dump else ()
    proc = run_module("ms_ocr.infer", "--model", matrix.cli, "--model-path", folder, "--image", *image_paths,
                      "--prompt", prompt, "--max-new-tokens", str(NEW_TOKENS), "--json", *mode, *dump_args,
                      *matrix.cli_args)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_variant_matches_reference(model, variant, matrix_checkpoint, matrix_images, tmp_path):
    """Tokens end to end through the CLI; its first logits (the CLI's --dump) within 1e-4 of max|logit|."""
    matrix = MATRICES[model]
    spec = matrix.variants[variant]
    folder = matrix_checkpoint(model, variant)
    paths = [matrix_images(matrix.images[name]) for name in spec["images"]]
    prompt = matrix.prompts[spec["prompt"]]
    want, want_logits = matrix.reference(folder, paths, prompt, NEW_TOKENS)
    got = cli_run(matrix, spec, folder, paths, prompt, dump=str(tmp_path / "dump"))
    assert [g["token_ids"] for g in got] == want
    dumped = np.load(os.path.join(got[0]["dump"], "logits.npy"))
    assert dumped.shape == (len(want[0]), want_logits.shape[-1])
    assert np.array_equal(np.load(os.path.join(got[0]["dump"], "token_ids.npy")), want[0])
    assert np.abs(dumped[0] - want_logits).max() <= 1e-4 * np.abs(want_logits).max()


def test_neighbour_layout_is_refused_in_one_line(model, neighbour, tmp_path):
    """A variant of the model's published layout that a neighbouring model could be taken for (the description's
    `neighbours`), run with the --model it could be mistaken for: refused in one line naming the right model (or
    both, where the files cannot tell), never run as the wrong one."""
    from tests.cli_util import assert_one_line_error
    spec = MATRICES[model].neighbours[neighbour]
    folder = MATRICES[model].build(str(tmp_path / "ckpt"), spec["layout"])
    if spec["config"] is not None:
        layouts.write_json(folder, "config.json", spec["config"](layouts.read_json(folder, "config.json")))
    proc = run_module("ms_ocr.infer", "--model", spec["model"], "--model-path", folder, "--image",
                      os.path.join(ROOT, "examples", "note.png"))
    assert_one_line_error(proc, *spec["refused"])


def test_generation_config_eos_list_stops_both_at_the_same_token(model, matrix_checkpoint, matrix_images,
                                                                 tmp_path):
    """The checkpoint's own eos: generation_config.json's list (here with a token the model emits at step 4 added)
    ends generation at that token's first occurrence, with finish_reason "stop", as transformers' generate does
    (DeepSeek-OCR v1's reference decoder has no stopping: its tokens are cut there)."""
    matrix = MATRICES[model]
    variant = next(iter(matrix.variants))
    spec = matrix.variants[variant]
    folder = str(tmp_path / "ckpt")
    shutil.copytree(matrix_checkpoint(model, variant), folder)
    path = matrix_images(matrix.images[spec["images"][0]])
    prompt = matrix.prompts["plain"]
    (free,), _ = matrix.reference(folder, [path], prompt, NEW_TOKENS)
    stop = free[4]
    want = free[:free.index(stop) + 1]
    gen = os.path.join(folder, "generation_config.json")
    eos = layouts.read_json(folder, "generation_config.json").get("eos_token_id") if os.path.isfile(gen) else None
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    layouts.set_eos(folder, eos + [stop])
    if matrix.cli != "deepseek-ocr":
        (ref,), _ = matrix.reference(folder, [path], prompt, NEW_TOKENS)
        assert ref == want
    (got,) = cli_run(matrix, spec, folder, [path], prompt)
    assert got["token_ids"] == want and got["finish_reason"] == "stop"


@pytest.mark.slow
def test_full_size_logits_match_transformers(full_size_model, graph_mode):
    """The real config (random weights saved as the hub ships them, kept in ~/.cache/ms_ocr/bench) on a page small
    enough for a few minutes on 2 cores: the prompt's logits at every position within 1e-4 of max|logit| of
    transformers' in fp32, and the same argmax everywhere. Ours runs in the description's dtype (fp32, or "auto":
    bf16 weights read exactly, where two fp32 copies of the model would not fit in memory)."""
    import torch

    from ms_ocr import models
    from bench.pages import document_page
    from tests.helpers.parity import rel_err
    from bench.real_size import BUILDERS

    matrix = MATRICES[full_size_model]
    # the folder scripts/benchmark.py uses
    folder = os.path.join(os.path.expanduser("~"), ".cache", "ms_ocr", "bench",
                          matrix.cli.replace("-", "_") + "_random")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        BUILDERS[matrix.cli](folder)
    img = document_page(*matrix.full_size["page"]).convert("RGB")
    prompt = matrix.full_size["prompt"]
    ref, inputs = matrix.reference_model(folder, [img], prompt)
    with torch.no_grad():
        want = ref(**inputs).logits[0].numpy()
    ids = inputs["input_ids"][0].numpy()
    del ref, inputs  # one model in memory at a time (DeepSeek-OCR-2's 3B in fp32 is 12 GB)
    gc.collect()
    pipe = models.get(matrix.cli).load(folder, "CPU", matrix.full_size.get("dtype", "fp32"))
    prep, _ = pipe.prepare([img], prompt)
    assert np.array_equal(ids, prep.input_ids)
    got = pipe.runtime.full_logits(prep, pipe.encode_images(prep))
    assert rel_err(got, want) < 1e-4
    assert np.array_equal(got.argmax(-1), want.argmax(-1))


# ---- per-component parity on the tiny checkpoint (the descriptions' `components`) -------------------------------

TOL = 1e-4
# (t, h, w) patch grids: wide, tall, square, and two images in one sequence
GRIDS = [[(1, 4, 10)], [(1, 12, 4)], [(1, 6, 6)], [(1, 4, 6), (1, 8, 4)]]


@pytest.fixture(scope="module")
def component_pair(request, graph_mode):
    """(our pipeline, the transformers model, the description's components) of this module's MODEL."""
    from ms_ocr import models
    from ms_ocr.runtime import Buckets
    components = MATRICES[request.module.MODEL].components
    folder = components["checkpoint"](request)
    pipe = models.get(request.module.MODEL).load(folder, "CPU", "auto", Buckets(prefill=32, slots=64))
    return pipe, components["reference"](folder), components


def test_vision_tower_and_features_match_reference(component_model, grids, chunk, component_pair, monkeypatch):
    """The ViT layers' output and the image features (after the model's merger / projector) of packed images (GRIDS),
    in blocks of `chunk` query rows (7: several blocks per image, the last one short); with the native attention
    routed, every layer's every block ran on it."""
    import torch

    from tests.helpers.parity import rel_err
    pipe, ref, c = component_pair
    rt = pipe.runtime
    monkeypatch.setattr(rt.vision, "attention_chunk", chunk)
    pix = c["patches"](grids, len(grids))
    inputs = pipe.vision_inputs({"image_grid_thw": np.array(grids), "pixel_values": pix})
    tower = np.concatenate([c["tower"](rt, item) for item in inputs])
    with torch.no_grad():
        ref_tower, ref_feats = c["ref_vision"](ref, pix, grids)
    assert rel_err(tower, ref_tower) < TOL
    kn = rt.plan.kernels
    kernels = kn.library if kn.attention is not None else None  # routed at this level
    before = kernels.attention_calls if kernels is not None else 0
    feats = rt.encode_images(inputs).asnumpy()
    assert feats.shape == ref_feats.shape
    assert rel_err(feats, ref_feats) < TOL
    if kernels is not None:
        blocks = sum(-(-(t * h * w) // chunk) for t, h, w in grids)
        assert kernels.attention_calls - before == pipe.cfg.vision.num_hidden_layers * blocks


def test_prefill_and_cached_decode_logits(component_model, chunk, host_cache, component_pair, monkeypatch):
    """Prefill logits over a two-image prompt (the multi-axis rope positions differ per axis there), then 10 cached
    decode steps, each against the reference's full forward; our cached steps against our own uncached forward.
    `chunk`: the prefill's causal attention block (8: several blocks over growing key prefixes); `host_cache`
    False: the caches written in the graph (as on Ascend and in the exported text graph)."""
    from ms_ocr.runtime import Prepared
    from tests.helpers.parity import rel_err
    pipe, ref, c = component_pair
    rt, cfg = pipe.runtime, pipe.cfg
    monkeypatch.setattr(rt, "host_writes", host_cache)
    grids = [(1, 4, 6), (1, 6, 4)]
    pix = c["patches"](grids, 7)
    prompt = c["prompt"](cfg, grids)
    cont = np.random.default_rng(1).integers(10, 250, 10)
    full = np.concatenate([prompt, cont])
    ref_logits, ref_pos, delta = reference_forward(ref, full, pix, grids, cfg.image_token_id)
    assert (ref_pos[1:] != ref_pos[0]).any()  # the prompt really exercises the multi-axis rope

    def prepared(ids, pos):
        return Prepared(input_ids=ids, position_ids=pos, rope_delta=delta,
                        image_token_mask=ids == cfg.image_token_id,
                        vision_inputs=pipe.vision_inputs({"image_grid_thw": np.array(grids), "pixel_values": pix}))

    s = len(prompt)
    rt.set_prefill_attention_block(chunk)
    try:
        prep = prepared(prompt, ref_pos[:, :s])
        feats = pipe.encode_images(prep)
        assert rel_err(rt.full_logits(prep, feats), ref_logits[:s]) < TOL
        last = rt.prefill(prep, feats, max_new_tokens=len(cont)).asnumpy()[0]
        assert rel_err(last, ref_logits[s - 1]) < TOL
        cache = rt.model.text_layers()[0].self_attn.k_cache
        assert cache.ndim == (4 if host_cache else 2) and rt.cache.in_graph != host_cache
        for i, tok in enumerate(cont[:-1]):
            step = rt.decode(int(tok), s + i, delta, pipe.num_pos_axes).asnumpy()[0]
            assert rel_err(step, ref_logits[s + i]) < TOL, f"decode step {i}"
            assert np.argmax(step) == np.argmax(ref_logits[s + i])
        ours_uncached = rt.full_logits(prepared(full, ref_pos), feats)
        assert rel_err(ours_uncached, ref_logits) < TOL
        assert rel_err(step, ours_uncached[-2]) < TOL
    finally:
        rt.set_prefill_attention_block(256)


# ---- reduced precision: --dtype bf16 (products in bf16 where the CPU has bf16 dot products) ----------------------

BF16_TOKENS = 24
# first-step logits: max |ours - transformers autocast| <= BF16_LOGIT_TOL * max|logit|. transformers' own fp32 and
# autocast runs of these tiny models differ by 1.1-1.8 % (2026-11-26) and agree on 1/24 (PaddleOCR-VL) and 6/24
# (HunyuanOCR) greedy tokens: random weights leave top-2 margins below bf16's rounding, so tokens are gated on the
# trained demo model instead (tests/demo/test_demo_bf16.py).
BF16_LOGIT_TOL = 0.05


@pytest.mark.gate
def test_bf16_logits_agree_with_transformers_autocast(bf16_model, matrix_checkpoint, matrix_images, tmp_path):
    """`infer --dtype bf16` on the model's first variant against transformers on the same bf16-rounded weights
    under torch.autocast(bfloat16) (its products in bf16 too): the first step's logits within BF16_LOGIT_TOL of
    max|logit|, and further from the exact path's than fp32 rounding (the products really ran in bf16) where the
    CPU has bf16 dot products; without them ours runs the exact path on bf16-rounded weights and says so."""
    import torch

    from ms_ocr.ops import native
    matrix = MATRICES[bf16_model]
    variant = next(v for v, spec in matrix.variants.items() if not spec.get("slow"))
    spec = matrix.variants[variant]
    folder = matrix_checkpoint(bf16_model, variant)
    path = matrix_images(matrix.images[spec["images"][0]])
    prompt = matrix.prompts[spec["prompt"]]
    model, inputs = matrix.reference_model(folder, [Image.open(path).convert("RGB")], prompt)
    model = model.to(torch.bfloat16).float()  # the weights --dtype bf16 reads
    with torch.no_grad():
        exact = model(**inputs).logits[0, -1].numpy()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want = model(**inputs).logits[0, -1].float().numpy()
    mode = ("--mode", spec["mode"]) if "mode" in spec else ()
    proc = run_module("ms_ocr.infer", "--model", matrix.cli, "--model-path", folder, "--image", path, "--prompt",
                      prompt, "--max-new-tokens", "1", "--dtype", "bf16", "--json", "--dump", str(tmp_path / "dump"),
                      *mode, *matrix.cli_args)
    assert proc.returncode == 0, proc.stderr
    (got,) = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    first = np.load(os.path.join(got["dump"], "logits.npy"))[0]
    scale = np.abs(want).max()
    assert np.abs(first - want).max() <= BF16_LOGIT_TOL * scale
    if native.cpu_bf16_dot() and native.dnnl_path() is not None:
        assert "products stay fp32" not in proc.stderr
        assert np.abs(first - exact).max() > 1e-4 * scale
    else:
        assert "--dtype bf16: products stay fp32" in proc.stderr


# ---- --kv-cache-dtype bf16: the KV cache in bf16 -----------------------------------------------------------------

KV16_TOKENS = 12
# every step's logits: max |ours - the rounded-cache reference| <= KV16_LOGIT_TOL * max|logit|. Not 1e-4: the two
# sides' fp32 k and v differ in their last bits, and a value that close to a bf16 tie rounds one bf16 step (2^-8)
# apart (measured 1e-5 - 2.5e-4 on PaddleOCR-VL's tiny model); the rounding itself moves the logits 3e-3 - 7e-3.
KV16_LOGIT_TOL = 1e-3


def _unpicked_id(matrix, folder, image, prompt):
    """The highest id that transformers' greedy run, stopping on it, does not reach in KV16_TOKENS steps."""
    import torch

    model, inputs = matrix.reference_model(folder, [image], prompt)
    picked = set()
    for eos in range(model.config.get_text_config().vocab_size - 1, -1, -1):
        if eos in picked:
            continue
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=KV16_TOKENS, do_sample=False, eos_token_id=eos)
        tokens = out[0, inputs["input_ids"].shape[1]:].tolist()
        if len(tokens) == KV16_TOKENS and eos not in tokens:
            return eos
        picked.update(tokens)
    raise AssertionError("the reference picks every id")


@pytest.mark.gate
@pytest.mark.parametrize("cache_mode", ["kv_bf16", "int8_auto"])
def test_bf16_kv_cache_matches_transformers_with_a_rounded_cache(bf16_model, cache_mode, matrix_checkpoint,
                                                                 matrix_images, tmp_path, monkeypatch):
    """`infer --kv-cache-dtype bf16` computes what transformers computes with its cache layers storing K and V
    rounded to bf16 (widened back to fp32): the prompt's attention over its own unrounded k, v (ms_ocr's prefill),
    every later step over the rounded cache and its own rounded k, v (DecodeLayer; the composed attention of a MoE
    decoder the host step does not run). The first step's logits (the prompt's, no cache read) within 1e-4 of
    max|logit|, every step's within KV16_LOGIT_TOL, the same greedy tokens; the steps after the first differ from
    the fp32 cache's by more than that (the rounding is really there). int8_auto: `--quantize int8` alone, whose cache `--kv-cache-dtype auto`
    makes bf16 (a MoE decoder's too, where the host step runs its layers), against transformers on the
    dequantised weights with the rounded cache."""
    import mindspore as ms
    import torch
    from transformers.cache_utils import DynamicLayer

    from ms_ocr import models
    matrix = MATRICES[bf16_model]
    variant = next(v for v, spec in matrix.variants.items() if not spec.get("slow"))
    spec = matrix.variants[variant]
    folder = str(tmp_path / "ckpt")
    shutil.copytree(matrix_checkpoint(bf16_model, variant), folder)
    path = matrix_images(matrix.images[spec["images"][0]])
    prompt = matrix.prompts[spec["prompt"]]
    # both runtimes stop on generation_config.json's eos only: an id the random model does not pick, so that every
    # run decodes KV16_TOKENS steps over the cache (DeepSeek-OCR-2's own eos ends at once)
    layouts.set_eos(folder, [_unpicked_id(matrix, folder, Image.open(path).convert("RGB"), prompt)])
    ref_folder, options = folder, ("--kv-cache-dtype", "bf16")
    if cache_mode == "int8_auto":
        spec_of = models.get(matrix.cli)
        net = spec_of.load(folder, "CPU", "auto", quantize="int8").runtime
        assert net.cache.dtype == ms.bfloat16  # a MoE decoder's too: the host step's DecodeLayer reads it
        ref_folder, options = str(tmp_path / "dequantised"), ("--quantize", "int8")
        write_dequantised_copy(net.model, spec_of, folder, ref_folder)
        del net
        gc.collect()

    def generate():
        model, inputs = matrix.reference_model(ref_folder, [Image.open(path).convert("RGB")], prompt)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=KV16_TOKENS, do_sample=False, output_logits=True,
                                 return_dict_in_generate=True)
        return out.sequences[0, inputs["input_ids"].shape[1]:].tolist(), [s[0].float().numpy() for s in out.logits]

    _, exact = generate()
    update = DynamicLayer.update

    def rounded_update(self, key_states, value_states, *args, **kwargs):
        first = not self.is_initialized
        keys, values = update(self, key_states.to(torch.bfloat16).float(), value_states.to(torch.bfloat16).float(),
                              *args, **kwargs)
        return (key_states, value_states) if first else (keys, values)

    monkeypatch.setattr(DynamicLayer, "update", rounded_update)
    want, want_logits = generate()
    mode = ("--mode", spec["mode"]) if "mode" in spec else ()
    proc = run_module("ms_ocr.infer", "--model", matrix.cli, "--model-path", folder, "--image", path, "--prompt",
                      prompt, "--max-new-tokens", str(KV16_TOKENS), *options, "--json", "--dump",
                      str(tmp_path / "dump"), *mode, *matrix.cli_args)
    assert proc.returncode == 0, proc.stderr
    (got,) = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert got["token_ids"] == want and len(want) == KV16_TOKENS
    logits = np.load(os.path.join(got["dump"], "logits.npy"))
    assert logits.shape == (len(want), want_logits[0].shape[-1])
    errs = [np.abs(ours - ref).max() / np.abs(ref).max() for ours, ref in zip(logits, want_logits)]
    assert errs[0] <= 1e-4 and max(errs) <= KV16_LOGIT_TOL, errs
    moved = [np.abs(logits[i] - exact[i]).max() / np.abs(exact[i]).max() for i in range(1, len(exact))]
    assert max(moved) > KV16_LOGIT_TOL, moved


# ---- --quantize int8: weight-only int8 decoder -------------------------------------------------------------------

INT8_TOKENS = 24
HEADS = {"own": ("untied", "own_head_flag_tied"), "tied": ("tied",)}  # the variants' head layouts (layouts.set_head)


INT8_CASES = (("int8", "own"), ("int8", "tied"), ("int8-g64", "tied"), ("int8-g32", "tied"))
# the tiny configs whose quantised matrices all have a multiple of 64 columns; DeepSeek-OCR-2's MoE experts have 32,
# which --quantize int8-g64 refuses (test_int8_groups_that_do_not_fit_are_refused)
G64_MODELS = ("paddleocr-vl", "hunyuan-ocr")


def _head_variant(model, head):
    """The model's first default-run variant with a head of kind `head`, or None."""
    return next((v for v, spec in MATRICES[model].variants.items()
                 if not spec.get("slow") and spec.get("head") in HEADS[head]), None)


@pytest.mark.gate
def test_int8_matches_transformers_on_the_dequantised_weights(bf16_model, quantize, head, matrix_checkpoint,
                                                               matrix_images, tmp_path, graph_mode):
    """`infer --quantize int8 --kv-cache-dtype fp32` (weights alone quantised; the bf16 cache that auto adds is
    gated above) computes what transformers computes in fp32 on the dequantised weights (each int8
    matrix times its row scales, written in fp32 into a copy of the checkpoint): the first step's logits within
    1e-4 of max|logit| and the same greedy tokens, INT8_TOKENS of them. For a model with its own head and for a
    tied one, whose embedding table is the int8 matrix (the prompt's embeddings are its dequantised rows); and
    with a scale per group of 32 columns (int8-g32: the grouped decode layers, head and lookup)."""
    import torch

    from ms_ocr import models
    matrix = MATRICES[bf16_model]
    spec_of = models.get(matrix.cli)
    variant = _head_variant(bf16_model, head)
    spec = matrix.variants[variant]
    folder = matrix_checkpoint(bf16_model, variant)
    net = spec_of.load(folder, "CPU", "auto", quantize=quantize).runtime.model
    assert net.tied == (head == "tied") and net.head_quantized
    quantized, params = quantized_params(net)
    assert quantized and all(f"{n}_scale" in params for n in quantized)
    head_name = "model.embed_tokens.weight" if net.tied else "lm_head.weight"
    assert head_name in quantized
    moe = [layer.mlp for layer in net.text_layers() if layer.moe]
    if moe and net.kernels.moe_experts is not None:  # a MoE decoder's routed experts, read by MoeExperts
        assert all(m.quantized and str(m.experts.up_proj.dtype) == "Int8" for m in moe)
    ref_dir = tmp_path / "dequantised"
    names = write_dequantised_copy(net, spec_of, folder, ref_dir)
    path = matrix_images(matrix.images[spec["images"][0]])
    prompt = matrix.prompts[spec["prompt"]]
    model, inputs = matrix.reference_model(str(ref_dir), [Image.open(path).convert("RGB")], prompt)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=INT8_TOKENS, do_sample=False, output_logits=True,
                             return_dict_in_generate=True)
    want = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    want_first = out.logits[0][0].float().numpy()
    mode = ("--mode", spec["mode"]) if "mode" in spec else ()
    proc = run_module("ms_ocr.infer", "--model", matrix.cli, "--model-path", folder, "--image", path, "--prompt",
                      prompt, "--max-new-tokens", str(INT8_TOKENS), "--quantize", quantize, "--kv-cache-dtype",
                      "fp32", "--json", "--dump", str(tmp_path / "dump"), *mode, *matrix.cli_args)
    assert proc.returncode == 0, proc.stderr
    (got,) = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    first = np.load(os.path.join(got["dump"], "logits.npy"))[0]
    err = np.abs(first - want_first).max() / np.abs(want_first).max()
    assert err <= 1e-4, (err, names, got["token_ids"], want)
    assert got["token_ids"] == want


@pytest.mark.gate
def test_int8_groups_that_do_not_fit_are_refused(g64_refused_model, matrix_checkpoint):
    """`infer --quantize int8-g64` on a matrix of columns that are no multiple of 64 is refused naming the matrix (one
    line, the mode to use instead), never run with a group cut short."""
    from tests.cli_util import assert_one_line_error
    matrix = MATRICES[g64_refused_model]
    folder = matrix_checkpoint(g64_refused_model, _head_variant(g64_refused_model, "tied"))
    proc = run_module("ms_ocr.infer", "--model", matrix.cli, "--model-path", folder, "--image",
                      os.path.join(ROOT, "examples", "note.png"), "--quantize", "int8-g64", *matrix.cli_args)
    assert_one_line_error(proc, "--quantize int8-g64: ", "columns, not a multiple of 64 (use --quantize int8)")
