import gc
import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("GLOG_v", "3")
os.environ.setdefault("MS_OCR_OFFLINE", "1")
# The persistent compile cache stays off in tests (each test that is about it turns it on in its own folder): a
# shared ~/.cache/ms_ocr/compile would carry graphs from one run of the suite into the next.
os.environ.setdefault("MS_OCR_COMPILE_CACHE", "0")

# The longest test files first (seconds of test time in a 2-worker run). run_tests.sh hands whole files to the
# workers in this order (--dist loadfile --no-loadscope-reorder); xdist's default order, most tests first,
# started these last (2026-11-23, one clean-clone run each: 896 s before, 862 s after).
LONGEST_FIRST = (  # seconds of test time, 2026-11-27 15:03-15:36 UTC (Intel Xeon model 207, a 2-worker run)
    "tests/demo/test_gate_crops.py",  # 254 s with its reduced-precision runs (2026-11-27, 22:24 UTC run)
    "tests/models/test_bf16_resident.py",  # 271 s (62 s of it now with -m slow)
    "tests/test_compile_cache.py",  # 202 s (subprocesses of the CLI and batch runner)
    "tests/test_export.py",  # 157 s
    "tests/batch/test_batch_jobs.py",  # 149 s
    "tests/pipeline/test_pipeline.py",  # 144 s
    "tests/serve/test_clients.py",  # 139 s
    "tests/matrix/test_deepseek_ocr2.py",  # 137 s
    "tests/demo/test_checkpoint_use.py",  # 123 s and the server's line reader test
    "tests/test_engine.py",  # 91 s
    "tests/matrix/test_paddleocr_vl.py",  # 91 s
    "tests/matrix/test_hunyuan_ocr.py",  # 88 s
    "tests/layout/pp_doclayout_v2/test_model.py",  # 86 s (as tests/models/pp_doclayout_v2/test_detector.py)
    "tests/batch/test_batch_cli.py",  # 78 s
    "tests/models/deepseek/test_ocr2_vision.py",  # 70 s
    "tests/models/paddleocr_vl/test_model_parity.py",  # 69 s
    "tests/matrix/test_deepseek_ocr.py",  # 63 s
    "tests/models/deepseek/test_ocr2_saved_checkpoint.py",  # 60 s
    "tests/serve/test_concurrency.py",  # 59 s
    "tests/ops/test_int8_kernels.py",  # 57 s
)


# Variants that run with -m slow only (the default run keeps a sibling of each that covers the same code): the suite
# stays within CI's 20 minutes on 2 cores. Test time of each on a 2-core Xeon, 2026-11-26.
SLOW_VARIANTS = (
    # bf16-resident DeepSeek-OCR-2: the 3-row batch stays (through the native decode kernels over bf16 weights);
    # (a): 2026-11-27, Intel Xeon model 207, where the suite took 26 minutes
    "tests/models/test_bf16_resident.py::test_one_sequence_bit_identical_to_fp32[deepseek-ocr2-False]",  # 44 s
    "tests/models/test_bf16_resident.py::test_one_sequence_bit_identical_to_fp32[deepseek-ocr2-True]",  # 62 s (a)
    "tests/models/test_bf16_resident.py::test_batch_decode_bit_identical_to_fp32[deepseek-ocr2-9]",  # 42 s
    "tests/models/test_bf16_resident.py::test_one_sequence_bit_identical_to_fp32[hunyuan-ocr-False]",  # 15 s
    "tests/models/test_bf16_resident.py::test_batch_decode_bit_identical_to_fp32[hunyuan-ocr-3]",  # 8 s
    "tests/models/test_staged_load.py::test_staged_load_answers_as_the_whole_load[hunyuan-ocr]",  # 21 s
    # both extreme aspect ratios stay (tiled, 6 in a row / column); the global view alone and an ordinary tiled
    # page are in test_ocr2_vision.py and the CLI's greedy test
    "tests/models/deepseek/test_ocr2_saved_checkpoint.py::test_image_features_and_first_logits_equal_reference"
    "[300x140]",  # 21 s
    "tests/models/deepseek/test_ocr2_saved_checkpoint.py::test_image_features_and_first_logits_equal_reference"
    "[900x500]",  # 22 s
    # the converter CLI's expert stacking (the loader stacks the same tensors in every DeepSeek load; the converter
    # itself is tested on PaddleOCR-VL in tests/convert)
    "tests/models/deepseek/test_ocr2_end_to_end.py::test_converted_checkpoint_stacks_experts_and_gives_the_same_tokens",
    # 25 s
    # (b): 2026-11-27, Intel Xeon model 207, test time of the 19:03 UTC run
    # int8 with the model's own head and with groups of 32 on HunyuanOCR's dense decoder, as PaddleOCR-VL's (whose
    # three int8 variants stay); DeepSeek-OCR-2 keeps its tied and grouped ones (the grouped MoE experts are its own)
    "tests/matrix/test_hunyuan_ocr.py::test_int8_matches_transformers_on_the_dequantised_weights[hunyuan-ocr-int8-own]",
    # 8 s (b)
    "tests/matrix/test_hunyuan_ocr.py::test_int8_matches_transformers_on_the_dequantised_weights"
    "[hunyuan-ocr-int8-g32-tied]",  # 12 s (b)
    "tests/matrix/test_deepseek_ocr2.py::test_int8_matches_transformers_on_the_dequantised_weights"
    "[deepseek-ocr2-int8-own]",  # 20 s (b)
    # the eos list of generation_config.json is read and applied by the runner for every model alike: PaddleOCR-VL
    # and DeepSeek-OCR (which cuts rather than stops) stay
    "tests/matrix/test_hunyuan_ocr.py::test_generation_config_eos_list_stops_both_at_the_same_token[hunyuan-ocr]",
    # 8 s (b)
    "tests/matrix/test_deepseek_ocr2.py::test_generation_config_eos_list_stops_both_at_the_same_token[deepseek-ocr2]",
    # 23 s (b)
    # 9 rows (more than the native kernels take) on HunyuanOCR's dense decoder, as PaddleOCR-VL's 9 rows
    "tests/models/test_bf16_resident.py::test_batch_decode_bit_identical_to_fp32[hunyuan-ocr-9]",  # 27 s (b)
)


# Each test worker on its own share of the cores (run_tests.sh: one worker per core, at most 2). Unpinned, every
# worker and the command lines it starts ran as many threads as the machine has cores, twice as many threads as
# cores in all, and the kernels' thread teams waited on threads the other worker had descheduled. The whole
# suite, 2026-11-29 on a 2-core AMD Zen 3: 21.1 min unpinned, 18.4 pinned (user time 38.0 -> 34.1 min, system
# 3.3 -> 1.9; docs/journal/benchmarks.md, "Test suite"). A worker whose siblings have finished takes their cores back
# (_take_back_freed_cores). MS_OCR_TEST_PIN=0 leaves the workers unpinned.
PIN_ENV = "MS_OCR_TEST_PIN"


def _core_shares():
    """(this worker's index, every worker's cores) when the workers pin, else None."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ... in an xdist worker
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    cpus = sorted(os.sched_getaffinity(0))
    if not worker.startswith("gw") or os.environ.get(PIN_ENV, "1") == "0" or not 2 <= count <= len(cpus):
        return None
    # a worker xdist starts in place of a crashed one has the next number (gw2 for two workers)
    return int(worker[2:]) % count, [set(cpus[i::count]) for i in range(count)]


def _cores_folder(controller_pid):
    import tempfile
    return os.path.join(tempfile.gettempdir(), f"ms_ocr_test_cores_{controller_pid}")


def _set_cores(cores, pids):
    """Every thread of the processes `pids` on `cores` (threads made later inherit it; so do child processes)."""
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), cores)
            except OSError:  # a thread that has just ended
                pass


def _descendants(pid):
    """pid and its living descendant processes (a test's fork server, servers the test started)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        out.append(todo.pop())
        todo += parents.get(out[-1], [])
    return out


class _Cores:
    """This worker's pinning: its own share of the cores, and its siblings' once they have finished."""
    index, shares, taken = None, None, set()


def pytest_configure(config):
    shares = _core_shares()
    if shares is None:
        if not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller, or a run without workers
            config.add_cleanup(lambda: shutil.rmtree(_cores_folder(os.getpid()), ignore_errors=True))
        return
    _Cores.index, _Cores.shares = shares
    _Cores.taken = {_Cores.index}
    os.makedirs(_cores_folder(os.getppid()), exist_ok=True)
    _set_cores(_Cores.shares[_Cores.index], [os.getpid()])


def pytest_unconfigure(config):
    if _Cores.shares is not None:  # this worker is done: its siblings may take its cores
        with open(os.path.join(_cores_folder(os.getppid()), f"{_Cores.index}.done"), "w"):
            pass


def pytest_sessionstart(session):
    """The native kernels' libraries built as the set-up builds them (scripts/ensure_env.sh, which run_tests.sh runs)
    where pytest runs without it and finds none built from these sources: once, under a lock (a check of a few
    milliseconds when they are there). libraries.py is loaded by its path: nothing heavy is imported here."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "ms_ocr_kernel_libraries", os.path.join(ROOT, "ms_ocr", "ops", "native", "libraries.py"))
    libraries = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(libraries)
    if libraries.missing():
        libraries.install()


def pytest_runtest_setup(item):
    _take_back_freed_cores()


def _ci():
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI (CI=true), a gate (@pytest.mark.gate: an accuracy or precision promise of the README) that skips
    fails instead: a run that did not check what the README promises must not be green."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _ci() and item.get_closest_marker("gate") is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"gate skipped under CI=true ({reason}): a README promise went unchecked"


def _take_back_freed_cores():
    """Add the cores of sibling workers that have finished to this worker's (with the processes it started)."""
    if _Cores.shares is None or len(_Cores.taken) == len(_Cores.shares):
        return
    try:
        done = {int(name.split(".")[0]) for name in os.listdir(_cores_folder(os.getppid())) if name.endswith(".done")}
    except OSError:
        return
    if done - _Cores.taken:
        _Cores.taken |= done
        _set_cores(set().union(*(_Cores.shares[i] for i in _Cores.taken)), _descendants(os.getpid()))


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection
def pytest_collection_modifyitems(session, config, items):
    # a generated test over an empty parameter set (tests/matrix/suite.py: a description without `components` or
    # `full_size`) does not apply to that model: left out rather than reported as skipped
    empty = [item for item in items if any(str(m.kwargs.get("reason", "")).startswith("got empty parameter set")
                                          for m in item.iter_markers("skip"))]
    if empty:
        config.hook.pytest_deselected(items=empty)
        items[:] = [item for item in items if item not in empty]
    for item in items:
        if item.nodeid in SLOW_VARIANTS:
            item.add_marker(pytest.mark.slow)
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order


def pytest_collection_finish(session):
    # MindSpore's graph compile starts with a full gc.collect() (ms_ocr/compiler.py, collector_skips_older_objects).
    # Beside torch, transformers and the collected test modules that walk took ~0.4 s a graph, 195 s of the suite's
    # test time in the tests that call Cells directly (2026-11-28, Intel Xeon model 207). In this session it
    # collects the young generations only (_YoungCollections), and what exists before each test file is frozen
    # (collector_walks_this_file_only).
    from mindspore.graph import api
    api.gc = _YoungCollections()


class _YoungCollections:
    """MindSpore's graph/api.py module `gc`, as the test session sees it: everything of the real module, but the
    full gc.collect() that begins each graph compile collects the two young generations only.

    In a user's run every compile goes through CompileTimer, which keeps the older objects out of that walk
    (ms_ocr/compiler.py, collector_skips_older_objects; a process with frozen objects of its own, as a worker here,
    it leaves alone). The tests that call Cells directly, and every compile in a worker, walked all the objects
    made since the last freeze: 132 full collections, 40.6 of the 177 s of tests/models/test_bf16_resident.py alone
    (gc.callbacks, 2026-11-28, AMD Zen 3), ~20 % of a worker's CPU over the suite (perf). The older objects are
    still collected by the interpreter's own full collections and once per test file
    (collector_walks_this_file_only). Installed once per worker by pytest_collection_finish; tests/test_runtime.py
    patches this module again to see MindSpore's calls."""

    def __getattr__(self, name):
        return getattr(gc, name)

    @staticmethod
    def collect(generation=2):
        return gc.collect(min(generation, 1))


@pytest.fixture(scope="module", autouse=True)
def collector_walks_this_file_only():
    """Before each test file: one full collection (what the earlier files left as garbage: their module fixtures
    are torn down by now), then what is left (modules imported lazily inside tests - transformers' model code -,
    session fixtures, caches) is frozen, out of the interpreter's own full collections during this file. Before
    the first file this freezes what collection made."""
    gc.collect()
    gc.freeze()
    yield


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """Factory: tiny_checkpoint(layout, tokenizer_kind, dtype, max_shard_size) -> folder, built once per session
    (tests/helpers/tiny_paddle.py)."""
    built = {}

    def get(layout="transformers", tokenizer_kind="json", dtype="float32", max_shard_size=None):
        key = (layout, tokenizer_kind, dtype, max_shard_size)
        if key not in built:
            from tests.helpers.tiny_paddle import make_tiny_checkpoint

            out = tmp_path_factory.mktemp(f"tiny_{layout}_{tokenizer_kind}_{dtype}")
            built[key] = make_tiny_checkpoint(str(out), layout=layout, dtype=dtype, max_shard_size=max_shard_size,
                                              tokenizer_kind=tokenizer_kind)
        return built[key]

    return get


@pytest.fixture(scope="session")
def tiny_dir(tiny_checkpoint):
    """The default tiny checkpoint: transformers layout, tokenizer.json, float32, one safetensors file."""
    return tiny_checkpoint()


@pytest.fixture(scope="session")
def graph_mode():
    """Graph mode on the CPU; the kernels a process on this machine chooses (ops.kernels.choose)."""
    import mindspore as ms

    from ms_ocr.ops import choose
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    return choose("CPU")


@pytest.fixture(scope="session")
def hunyuan_checkpoint(tmp_path_factory):
    """Factory: hunyuan_checkpoint(layout, dtype, max_shard_size) -> tiny HunyuanOCR folder, built once per session
    (tests/helpers/tiny_hunyuan.py)."""
    built = {}

    def get(layout="transformers", dtype="float32", max_shard_size=None):
        key = (layout, dtype, max_shard_size)
        if key not in built:
            from tests.helpers.tiny_hunyuan import make_tiny_checkpoint

            out = tmp_path_factory.mktemp(f"hunyuan_{layout}_{dtype}")
            built[key] = make_tiny_checkpoint(str(out), layout=layout, dtype=dtype, max_shard_size=max_shard_size)
        return built[key]

    return get
