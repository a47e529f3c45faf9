"""Every native kernel at the SIMD levels this machine cannot run through MindSpore, and every library the install
builds: the kernels' sources cross-built for aarch64 (NEON) with a small standalone driver
(tests/ops/kernel_harness.cc) and run under qemu-user, and the same driver linked against each install level's
library (x86-64-v3, x86-64-v4, native; libraries.py) this CPU runs, against float64 NumPy (correctness only; qemu's
timings mean nothing). The MindSpore Custom-op tests of each kernel cover the x86 levels this CPU runs (test_native.py
and others). The pick among the built libraries (libraries.pick) for CPUs of other flag sets.
"""

import numpy as np
import pytest

from ms_ocr.convert.loader import round_to_bf16
from ms_ocr.ops import native
from ms_ocr.ops.native import libraries
from tests.helpers.native import (AARCH64_CXX, AARCH64_SYSROOT, CXX, QEMU, bf16_bits, build_harness,
                                  needs_aarch64_tools, needs_compiler, run_harness)
from tests.ops import test_causal_attention, test_decode_layer, test_native_gelu, test_vision_attention


def _cases():
    """(name, kernel, inputs, output shapes, float64 reference outputs, tolerance relative to max(1, |ref|))."""
    rng = np.random.default_rng(11)
    cases = []
    for m, n, k in [(1, 1030, 1000), (3, 37, 37), (8, 257, 1152), (5, 9, 3)]:
        x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
        cases.append((f"matmul_t_{m}x{n}x{k}", "MatMulT", [x, w], [(m, n)],
                      [x.astype(np.float64) @ w.astype(np.float64).T], 1e-5))
    for i, case in enumerate(test_decode_layer.CASES):
        *tensors, weights = test_decode_layer.make_case(np.random.default_rng(i), *case)
        ref = test_decode_layer.reference(*tensors, weights, 1e-5)
        cases.append((f"decode_layer_{i}", "DecodeLayer", [*tensors, *weights, np.array([1e-5], np.float32)],
                      [r.shape for r in ref], list(ref), 2e-5))
    for i, case in enumerate(test_decode_layer.CASES[:5]):  # bf16 caches (--kv-cache-dtype bf16)
        *tensors, weights = test_decode_layer.make_case(np.random.default_rng(i), *case)
        k16, v16 = (round_to_bf16(c) for c in tensors[4:6])
        _, k, v = test_decode_layer.reference(*tensors[:4], k16, v16, weights, 1e-5)
        own = [round_to_bf16(a.astype(np.float32)) for a in (k, v)]  # the token's k, v as the cache will hold them
        ref = test_decode_layer.reference(*tensors[:4], k16, v16, weights, 1e-5, own=own)
        cases.append((f"decode_layer_kv16_{i}", "DecodeLayer",
                      [*tensors[:4], bf16_bits(k16), bf16_bits(v16), *weights, np.array([1e-5], np.float32)],
                      [r.shape for r in ref], [ref[0], *own], "kv16"))
    for case in test_vision_attention.CASES:
        q, k, v = test_vision_attention._case(np.random.default_rng(sum(case)), *case)
        scale = case[3] ** -0.5
        ref = test_vision_attention.reference(q, k, v, scale)
        cases.append(("attention_" + "x".join(map(str, case)), "VisionAttention",
                      [q, k, v, np.array([scale], np.float32)], [q.shape], [ref], 2e-6))
    for case in test_causal_attention.CASES:
        q, k, v = test_causal_attention.make_case(np.random.default_rng(sum(case)), *case)
        scale = case[4] ** -0.5
        ref = test_causal_attention.reference(q, k, v, scale)
        cases.append(("causal_attention_" + "x".join(map(str, case)), "CausalAttention",
                      [q, k, v, np.array([scale], np.float32)], [q.shape], [ref], 2e-6))
    x = test_native_gelu._inputs()
    for erf_form, kernel in ((False, "GeluTanh"), (True, "GeluErf")):
        cases.append((kernel, kernel, [x], [x.shape], [test_native_gelu.reference(x, erf_form)], "gelu"))
    return cases


CASES = _cases()


def _int8_cases():
    """--quantize int8's kernels (weights int8 with one fp32 scale per row, or per group of columns): MatMulTQ8,
    DequantQ8 (fp32 output) and DecodeLayer over the seven int8 matrices of each decode-layer case, against float64
    NumPy on the dequantised weights (tests/ops/test_int8_kernels.py runs the same through MindSpore at the x86
    levels)."""
    from ms_ocr.convert.quantize import quantize_rows
    from tests.helpers.quant import dequantized

    rng = np.random.default_rng(13)
    cases = []
    for m, n, k, group in [(1, 301, 1003, 0), (3, 37, 37, 0), (8, 257, 1152, 0), (1, 301, 1024, 32),
                           (5, 37, 128, 64)]:
        x = rng.standard_normal((m, k)).astype(np.float32)
        q, s = quantize_rows(rng.standard_normal((n, k)), group=group)
        cases.append((f"matmul_t_q8_{m}x{n}x{k}_g{group}", "MatMulTQ8", [x, q, s], [(m, n)],
                      [x.astype(np.float64) @ dequantized(q, s).T], 2e-5))
    for group, k in [(0, 333), (32, 352)]:
        q, s = quantize_rows(rng.standard_normal((70, k)), group=group)
        cases.append((f"dequant_q8_g{group}", "DequantQ8", [q, s], [q.shape], [dequantized(q, s).astype(np.float32)],
                      0.0))
    for i, case in enumerate(test_decode_layer.CASES):
        *tensors, weights = test_decode_layer.make_case(np.random.default_rng(i), *case)
        mats = [1, 2, 3] + ([6, 8, 9, 10] if len(weights) == 11 else [4, 6, 7, 8])  # q k v o gate up down
        for group in (0, 16):
            if group and any(weights[j].shape[1] % group for j in mats):
                continue
            args, deq, scales = list(weights), list(weights), []
            for j in mats:
                q, s = quantize_rows(weights[j], group=group)
                args[j], deq[j] = q, dequantized(q, s).astype(np.float32)
                scales.append(s.ravel())
            ref = test_decode_layer.reference(*tensors, deq, 1e-6)
            eps = [1e-6, group] if group else [1e-6]
            cases.append((f"decode_layer_q8_{i}_g{group}", "DecodeLayer",
                          [*tensors, *args, np.concatenate(scales), np.array(eps, np.float32)],
                          [r.shape for r in ref], list(ref), 2e-5))
    return cases


INT8_CASES = _int8_cases()


def _bf16_pairs():
    """(name, kernel, fp32 inputs, the same inputs with the weights as bfloat16 words, output shapes, float64
    reference, tolerance): weights rounded to bf16 first, so both forms hold the same values."""
    rng = np.random.default_rng(12)
    pairs = []
    for m, n, k in [(1, 1030, 1000), (4, 37, 37), (8, 257, 1152), (5, 9, 3)]:
        x, w = rng.standard_normal((m, k)).astype(np.float32), round_to_bf16(rng.standard_normal((n, k)))
        pairs.append((f"matmul_t_bf16_{m}x{n}x{k}", "MatMulT", [x, w], [x, bf16_bits(w)], [(m, n)],
                      [x.astype(np.float64) @ w.astype(np.float64).T], 1e-5))
    for i, case in enumerate(test_decode_layer.CASES):
        *tensors, weights = test_decode_layer.make_case(np.random.default_rng(i), *case)
        weights = [round_to_bf16(w) for w in weights]
        ref = test_decode_layer.reference(*tensors, weights, 1e-5)
        eps = np.array([1e-5], np.float32)
        pairs.append((f"decode_layer_bf16_{i}", "DecodeLayer", [*tensors, *weights, eps],
                      [*tensors, *(bf16_bits(w) for w in weights), eps], [r.shape for r in ref], list(ref), 2e-5))
    table = round_to_bf16(rng.standard_normal((50, 37)))
    ids = np.array([[3, 0, 49], [7, 7, 60]], np.int32)  # 60: out of range, a zero row
    want = np.where((ids < 50)[..., None], table[np.minimum(ids, 49)], 0.0)
    pairs.append(("gather_rows_bf16", "GatherRows", [table, ids], [bf16_bits(table), ids], [want.shape], [want], 0.0))
    stack = round_to_bf16(rng.standard_normal((6, 5, 7)))  # an expert stack [E, I, H]: a row is [I, H]
    picked = np.array([4, 0, 4, 9], np.int32)
    want = np.where((picked < 6)[:, None, None], stack[np.minimum(picked, 5)], 0.0)
    pairs.append(("gather_rows_bf16_stack", "GatherRows", [stack, picked], [bf16_bits(stack), picked], [want.shape],
                  [want], 0.0))
    table = round_to_bf16(rng.standard_normal((30, 37)))  # a position table; 4 taps per row, one out of range
    idx = rng.integers(0, 30, (70, 4)).astype(np.int32)
    idx[5, 2] = 31
    w = rng.random((70, 4)).astype(np.float32)
    want = (np.where((idx < 30)[..., None], table[np.minimum(idx, 29)], 0.0) * w[..., None].astype(np.float64)).sum(1)
    pairs.append(("interp_rows_bf16", "InterpRows", [table, idx, w], [bf16_bits(table), idx, w], [want.shape], [want],
                  1e-6))
    x = round_to_bf16(rng.standard_normal((3, 70001)))  # several chunks of the parallel loop and a tail
    pairs.append(("widen_bf16", "WidenBf16", None, [bf16_bits(x)], [x.shape], [x], 0.0))
    return pairs


BF16_PAIRS = _bf16_pairs()


def _check_bf16(runner, tmp_path, threads, level):
    """Each kernel with bf16 weights gives bit for bit its result on the same weights in fp32 (GatherRows and
    WidenBf16: the widened values themselves), and matches float64 NumPy."""
    for name, kernel, fp32_inputs, bf16_inputs, out_shapes, refs, tol in BF16_PAIRS:
        got, got_level = run_harness(runner, kernel, bf16_inputs, out_shapes, str(tmp_path / name), threads)
        assert got_level == level, name
        want = refs  # exact kernels (GatherRows, WidenBf16): the values themselves
        if fp32_inputs is not None:
            want, _ = run_harness(runner, kernel, fp32_inputs, out_shapes, str(tmp_path / (name + "_fp32")), threads)
        for g, w in zip(got, want):
            assert np.array_equal(g.view(np.uint32), w.view(np.uint32)), name
        _check(got, refs, tol)


def _check(outs, refs, tol):
    for got, want in zip(outs, refs):
        assert got.shape == want.shape
        if tol == "gelu":  # |x| up to 100: a few fp32 ulps, absolute (as test_native_gelu)
            assert np.abs(got - want).max() <= 5e-5
        elif tol == "kv16":  # bf16 caches: x, then k and v rounded to bf16 (one bf16 step apart where fp32 and
            # float64 fall either side of a tie; then x moves by a little of that key's or value's share)
            limit = 1e-4 if got is outs[0] else 2 ** -8
            assert np.abs(got - want).max() <= limit * max(1.0, np.abs(want).max())
        else:
            assert np.abs(got - want).max() <= tol * max(1.0, np.abs(want).max())


@pytest.fixture(scope="module")
def aarch64_harness(tmp_path_factory):
    return build_harness(str(tmp_path_factory.mktemp("aarch64")), AARCH64_CXX)


@needs_aarch64_tools
@pytest.mark.parametrize("threads", [1, 2])
def test_aarch64_neon_kernels_match_numpy(aarch64_harness, tmp_path, threads):
    """The aarch64 build (the host CPUs of Ascend servers, e.g. Kunpeng) takes the NEON vectors and computes every
    kernel, the int8 ones included, within the x86 builds' tolerances."""
    runner = [QEMU, "-L", AARCH64_SYSROOT, aarch64_harness]
    for name, kernel, inputs, out_shapes, refs, tol in CASES + INT8_CASES:
        outs, level = run_harness(runner, kernel, inputs, out_shapes, str(tmp_path / name), threads)
        assert level == "neon", name
        _check(outs, refs, tol)
    _check_bf16(runner, tmp_path, threads, "neon")


def _install_levels():
    """(-march, the SIMD level its library reports) of each library the install builds on this machine that its CPU
    runs (native: whatever this CPU's widest level is)."""
    flags, level_of = libraries.cpu_flags(), {"x86-64-v3": "avx2", "x86-64-v4": "avx512", "armv8-a": "neon"}
    return [(march, level_of.get(march)) for march in libraries.levels()
            if march == "native" or libraries.NEEDS[march] <= flags]


@needs_compiler
@pytest.mark.parametrize("arch,level", _install_levels())
def test_install_level_libraries_match_numpy(tmp_path, arch, level):
    """Each library the install builds (native.build returns the installed one; in a tree without them it compiles
    that level into the cache) computes every kernel's cases within the tolerances and reports its level, its bf16
    weights bit for bit its fp32 results: the driver linked against it, so the harness itself is checked against
    the Custom-op tests' results too. (The SSE2 build, x86-64-v2, is the Custom-op tests' isa_kernels fixture's.)"""
    library = native.build(arch=arch)
    exe = build_harness(str(tmp_path), CXX, library=library)
    for name, kernel, inputs, out_shapes, refs, tol in CASES + INT8_CASES:
        outs, got_level = run_harness([exe], kernel, inputs, out_shapes, str(tmp_path / name))
        assert got_level == (level or native.NativeKernels(library).isa_level), name
        _check(outs, refs, tol)
    _check_bf16([exe], tmp_path, 2, got_level)


# The records of an x86 install's libraries, as libraries.records reads them (native built on `BUILD_CPU`)
BUILD_FLAGS = sorted(libraries.X86_64_V4 | {"avx512_bf16", "amx_tile", "amx_bf16", "sse2"})
X86_INSTALL = [{"march": "x86-64-v3", "machine": "x86_64", "needs": sorted(libraries.X86_64_V3), "path": "v3"},
               {"march": "x86-64-v4", "machine": "x86_64", "needs": sorted(libraries.X86_64_V4), "path": "v4"},
               {"march": "native", "machine": "x86_64", "needs": BUILD_FLAGS, "cpu": "BUILD_CPU", "path": "native"}]


@pytest.mark.parametrize("flags,tag,want", [
    (BUILD_FLAGS, "BUILD_CPU", "native"),  # the CPU it was built on
    (BUILD_FLAGS + ["avx512_fp16"], "A_NEWER_CPU", "native"),  # a CPU with all of its build CPU's flags and more
    (sorted(libraries.X86_64_V4 | {"sse2"}), "AN_AVX512_CPU", "v4"),  # AVX-512 without the build CPU's bf16 / AMX
    (sorted(libraries.X86_64_V3), "AN_AVX2_CPU", "v3"),  # AVX2 / FMA, no AVX-512 (e.g. Zen 3)
    (sorted(libraries.X86_64_V3 - {"fma"}), "NO_FMA", None),  # short of x86-64-v3: none of them runs
    (sorted(libraries.X86_64_V2), "AN_SSE4_CPU", None),
])
def test_pick_takes_the_best_library_the_cpu_runs(flags, tag, want):
    """libraries.pick, as ggml picks among its CPU variants: native where the CPU has every flag of the CPU it was
    built on, else the widest level whose instruction sets the CPU has; None when none runs (MindSpore's kernels)."""
    chosen = libraries.pick(X86_INSTALL, frozenset(flags), tag, mach="x86_64")
    assert (chosen and chosen["path"]) == want


def test_pick_prefers_this_cpus_own_native_build_and_ignores_other_machines():
    other = dict(X86_INSTALL[2], cpu="OTHER_CPU", path="native-other", needs=sorted(libraries.X86_64_V3))
    arm = {"march": "armv8-a", "machine": "aarch64", "needs": ["asimd"], "path": "arm"}
    unknown = {"march": "znver4", "machine": "x86_64", "needs": [], "path": "znver4"}  # only MS_OCR_NATIVE_ARCH's
    recs = X86_INSTALL + [other, arm, unknown]
    assert libraries.pick(recs, frozenset(BUILD_FLAGS), "BUILD_CPU", mach="x86_64")["path"] == "native"
    assert libraries.pick(recs, frozenset(libraries.X86_64_V4), "ANOTHER", mach="x86_64")["path"] == "native-other"
    assert libraries.pick(recs, frozenset({"asimd", "fp"}), "AN_ARM_CPU", mach="aarch64")["path"] == "arm"
    assert libraries.pick(recs, frozenset({"fp"}), "AN_ARM_CPU", mach="aarch64") is None


@needs_compiler
def test_this_process_loads_the_best_installed_library():
    """Where the install built its libraries (the set-up, scripts/ensure_env.sh, or setup.py), the process loads the
    one `pick` takes for this CPU (native, where it was built on this CPU), and says which (build_arch)."""
    recs = [r for r in libraries.records(native.LIB_DIR) if libraries.is_fresh(r)]
    best = libraries.pick(recs, libraries.cpu_flags(), libraries.cpu_tag())
    if best is None:
        pytest.skip(f"no library in {native.LIB_DIR} runs on this CPU (scripts/ensure_env.sh builds them)")
    kernels = native.load()
    assert kernels is not None and kernels.path == best["path"] and kernels.march == best["march"]
    assert native.build_arch() == best["march"]
    if libraries.installed("native") is not None:
        assert kernels.march == "native"
