"""The benchmarks' summary over repeated rounds (tests/helpers/bench_report.py; the workers themselves run in the
benchmarks)."""

import json

import pytest

from tests.helpers.bench_report import (median_result, parse_log, print_table, process_report, round_ratios,
                                        tokens_agreement, write_json)


def _run(vision, prefill, tok_s, rss, compile_vision, tokens):
    return {"framework": "x", "vision_ms": vision, "prefill_ms": prefill, "decode_tokens_per_s": tok_s,
            "decode_ms_per_token": 1000.0 / tok_s, "peak_rss_gb": rss, "prompt_tokens": 1019,
            "compile_s": {"vision": compile_vision}, "tokens": tokens}


def test_median_result_takes_each_figure_median_and_first_round_tokens():
    runs = [_run(50.0, 5.0, 10.0, 5.1, 3.0, [1, 2]), _run(40.0, 7.0, 12.0, 5.0, 4.0, [1, 3]),
            _run(60.0, 6.0, 11.0, 5.2, 2.0, [1, 2])]
    out = median_result(runs)
    assert out["vision_ms"] == 50.0 and out["prefill_ms"] == 6.0 and out["decode_tokens_per_s"] == 11.0
    assert out["peak_rss_gb"] == 5.1 and out["compile_s"] == {"vision": 3.0}
    assert out["prompt_tokens"] == 1019 and isinstance(out["prompt_tokens"], int)
    assert out["tokens"] == [1, 2] and out["framework"] == "x"
    assert runs[0]["vision_ms"] == 50.0  # inputs untouched


def test_round_ratios():
    r = round_ratios({"ms_ocr": _run(45.0, 5.0, 12.0, 5.0, 3.0, []),
                      "transformers": _run(40.0, 10.0, 8.0, 5.2, 0.0, [])})
    assert r["vision_prefill"] == pytest.approx(1.0)
    assert r["decode_speedup"] == pytest.approx(1.5)
    assert r["rss"] == pytest.approx(5.0 / 5.2)


def test_tokens_agreement_counts_positions_that_match():
    assert tokens_agreement({"ms_ocr": {"tokens": [5, 6, 7, 8]}, "transformers": {"tokens": [5, 9, 7, 8]}}) == "3/4"


LLAMA_LOG = """
load time = 170.45 ms
mtmd batch encoding done in 43210 ms
decoding image batch 1/1, n_tokens_batch = 999
image decoded (batch 1/1) in 2100 ms
prompt eval time =   47000.00 ms /  1012 tokens (   46.44 ms per token,    21.53 tokens per second)
       eval time =    1240.00 ms /    31 runs   (   40.00 ms per token,    25.00 tokens per second)
"""


def test_llamacpp_log_figures():
    """llama.cpp's prompt eval spans the image encode: prefill is prompt eval minus the encode."""
    r = parse_log(LLAMA_LOG)
    assert r["vision_ms"] == 43210 and r["prefill_ms"] == pytest.approx(47000 - 43210)
    assert r["decode_ms_per_token"] == 40.0 and r["decode_tokens_per_s"] == 25.0
    assert r["image_tokens"] == 999 and r["prompt_tokens"] == 1012 and r["load_s"] == pytest.approx(0.17045)


def test_process_table_ratios_are_to_llamacpp(capsys):
    cols = {"ms_ocr CLI second run": [{"wall_s": 30.0, "decode_ms_per_token": 45.0, "peak_rss_gb": 3.0},
                                      {"wall_s": 40.0, "decode_ms_per_token": 47.0, "peak_rss_gb": 3.2},
                                      {"wall_s": 35.0, "decode_ms_per_token": 46.0, "peak_rss_gb": 3.1}],
            "llama.cpp BF16": [{"wall_s": 50.0, "decode_ms_per_token": 40.0, "peak_rss_gb": 2.0}]}
    med = process_report(cols)
    assert med["ms_ocr CLI second run"]["wall_s"] == 35.0 and med["llama.cpp BF16"]["load_s"] is None
    out = capsys.readouterr().out
    assert "process wall s" in out and "0.70" in out and "1.15" in out and "1.55" in out


def test_print_table_aligns_formats_and_marks_ratios(capsys):
    print_table([("build", 7, "<"), ("ms", 8, ".2f"), ("vs b1", 7, ".2fx")],
                [("native", 12.345, 1.0), ("v3", None, 0.456)])
    assert capsys.readouterr().out.splitlines() == ["build        ms  vs b1",
                                                    "native    12.35  1.00x",
                                                    "v3            -  0.46x"]


def test_write_json_makes_the_folder(tmp_path, capsys):
    path = write_json(str(tmp_path / "out" / "deeper"), "b.json", {"rows": [1, 2]})
    assert json.load(open(path)) == {"rows": [1, 2]}
    assert capsys.readouterr().out == f"wrote {path}\n"


def _benchmark_module(monkeypatch, name):
    import importlib
    import os
    scripts = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
    monkeypatch.syspath_prepend(scripts)
    benchmark = importlib.import_module("benchmark")
    monkeypatch.setattr(benchmark, "ensure_checkpoint", lambda model, ckpt: "ckpt-dir")
    return importlib.import_module(name)


def _batch_row(b):
    return {"batch": b, "pages_per_s": 1.0, "tokens_per_s": 2.0, "decode_tokens_per_s": 3.0, "decode_ms_per_step": 4.0,
            "avg_first_token_ms": 5.0, "compile_s": 0.0, "peak_rss_gb": 1.0}


@pytest.mark.parametrize("name", ["benchmark_batch", "benchmark_serve"])
def test_benchmarks_pass_the_precision_options_on(monkeypatch, tmp_path, name):
    """--dtype, --quantize and --kv-cache-dtype reach every ms_ocr process a benchmark starts (--dtype and
    --quantize were accepted, and --quantize was dropped, by the batch and serve benchmarks)."""
    module = _benchmark_module(monkeypatch, name)
    calls, servers = [], []

    def fake_worker(script, argv, threads, label):
        calls.append([str(a) for a in argv])
        if name == "benchmark_batch":
            return _batch_row(int(argv[argv.index("--batch") + 1]))
        return {"mode": "infer", "concurrency": 1, "requests": 1, "tokens": 8, "wall_s": 1.0, "ttft_s": [0.5],
                "latency_s": [1.0]}

    def fake_server(args):
        servers.append((args.dtype, args.quantize))
        return []

    monkeypatch.setattr(module, "run_json_worker", fake_worker)
    if name == "benchmark_serve":
        monkeypatch.setattr(module, "run_server", fake_server)
    monkeypatch.setattr("sys.argv", [name, "--dtype", "bf16", "--quantize", "int8", "--kv-cache-dtype", "bf16",
                                     "--out", str(tmp_path)])
    module.main()
    assert calls
    for argv in calls:
        assert argv[argv.index("--dtype") + 1] == "bf16" and argv[argv.index("--quantize") + 1] == "int8"
        assert argv[argv.index("--kv-cache-dtype") + 1] == "bf16"
    saved = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert saved["dtype"] == "bf16" and saved["quantize"] == "int8" and saved["kv_cache_dtype"] == "bf16"
    if name == "benchmark_serve":
        assert servers == [("bf16", "int8")]

        class Started(Exception):
            pass

        def fake_popen(cmd, **kwargs):
            calls.append(cmd)
            raise Started

        monkeypatch.setattr(module.subprocess, "Popen", fake_popen)
        args = type("Args", (), dict(model="paddleocr-vl", ckpt="ckpt-dir", max_num_seqs=8, max_model_len=512,
                                     dtype="bf16", quantize="int8", kv_cache_dtype="bf16", threads=2, requests=4))
        with pytest.raises(Started):
            module.start_server(args, 8000)
        cmd = calls[-1]
        assert cmd[cmd.index("--dtype") + 1] == "bf16" and cmd[cmd.index("--quantize") + 1] == "int8"
        assert cmd[cmd.index("--kv-cache-dtype") + 1] == "bf16"
