"""The benchmarks' summary over repeated rounds (bench/report.py; the workers themselves run in the benchmarks), their
shared command-line plumbing (bench/run.py) and the batch and serve benchmarks' command lines (bench/commands.py)."""

import json

import pytest

from bench.report import (median_result, parse_log, print_table, process_report, round_ratios, tokens_agreement,
                          write_json)


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


def test_model_benchmarks_pass_the_precision_options_to_their_workers(monkeypatch, tmp_path):
    """--dtype, --quantize and --kv-cache-dtype, parsed by the options every model benchmark shares (add_run_args,
    parse_main_args), reach the worker command line run_json_worker starts with precision_argv (--quantize was once
    dropped by the batch and serve benchmarks)."""
    import argparse
    import subprocess

    from bench import run

    (tmp_path / "config.json").write_text("{}")  # a checkpoint there: ensure_checkpoint builds none
    p = argparse.ArgumentParser()
    run.add_run_args(p, region=(448, 224))
    monkeypatch.setattr("sys.argv", ["bench", "--dtype", "bf16", "--quantize", "int8", "--kv-cache-dtype", "bf16",
                                     "--ckpt", str(tmp_path)])
    args = run.parse_main_args(p, worker=None)
    assert (args.ckpt, args.width, args.height) == (str(tmp_path), 448, 224)
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append((cmd, kwargs["env"]))
        return subprocess.CompletedProcess(cmd, 0, stdout='log\n{"rows": 1}\n', stderr="")

    monkeypatch.setattr(run.subprocess, "run", fake_run)
    assert run.run_json_worker("w.py", ["--worker", "--batch", 2, *run.precision_argv(args)], 3, "w") == {"rows": 1}
    (cmd, env), = calls
    assert cmd[cmd.index("--dtype") + 1] == "bf16" and cmd[cmd.index("--quantize") + 1] == "int8"
    assert cmd[cmd.index("--kv-cache-dtype") + 1] == "bf16" and cmd[cmd.index("--batch") + 1] == "2"
    assert env["OMP_NUM_THREADS"] == "3"


def _precision(argv):
    argv = [str(a) for a in argv]
    return argv[argv.index("--dtype") + 1], argv[argv.index("--quantize") + 1], argv[argv.index("--kv-cache-dtype") + 1]


@pytest.mark.parametrize("name", ["benchmark_batch", "benchmark_serve"])
def test_benchmarks_pass_the_precision_options_on(monkeypatch, tmp_path, name):
    """--dtype, --quantize and --kv-cache-dtype reach every ms_ocr process a benchmark starts, and its saved JSON
    (--dtype and --quantize were accepted, and --quantize was dropped, by the batch and serve benchmarks):
    scripts/benchmark_batch.py and scripts/benchmark_serve.py parse their options, build their worker and server
    command lines and their JSON record with bench/commands.py."""
    import argparse

    from bench import commands, run

    batch = name == "benchmark_batch"

    def parser():  # the script's, as its main process and each --worker process build it
        p = argparse.ArgumentParser()
        (commands.add_batch_args if batch else commands.add_serve_args)(p)
        return p

    monkeypatch.setattr(run, "ensure_checkpoint", lambda model, ckpt: "ckpt-dir")
    monkeypatch.setattr("sys.argv", [name, "--dtype", "bf16", "--quantize", "int8", "--kv-cache-dtype", "bf16",
                                     "--out", str(tmp_path)])
    args = run.parse_main_args(parser(), worker=None)
    workers = ([commands.batch_worker_argv(args, b) for b in args.batch_sizes] if batch
               else [commands.serve_infer_argv(args)])
    assert len(workers) == (3 if batch else 1)
    for argv in workers:
        assert _precision(argv) == ("bf16", "int8", "bf16")
        # the worker (the same script, --worker) parses its command line to the main process's settings
        seen = []
        monkeypatch.setattr("sys.argv", [name, *[str(a) for a in argv]])
        with pytest.raises(SystemExit):
            run.parse_main_args(parser(), worker=lambda a: seen.append(a) or {})
        (got,) = seen
        assert (got.dtype, got.quantize, got.kv_cache_dtype, got.ckpt) == ("bf16", "int8", "bf16", "ckpt-dir")
        assert got.new_tokens == args.new_tokens and (got.width, got.height) == (args.width, args.height)
        if batch:
            assert got.batch == int(argv[argv.index("--batch") + 1]) and got.pages == args.pages
        else:
            assert got.requests == args.requests
    rows = [{"batch": 1}] if batch else [{"mode": "infer"}]
    record = (commands.batch_record if batch else commands.serve_record)(args, rows)
    saved = json.loads(open(write_json(args.out, f"{name}.json", record)).read())
    assert saved["dtype"] == "bf16" and saved["quantize"] == "int8" and saved["kv_cache_dtype"] == "bf16"
    assert saved["rows"] == rows
    if not batch:
        from ms_ocr.serve.cli import build_parser

        cmd = commands.server_command(args, 8000)
        assert cmd[1:3] == ["-m", "ms_ocr.serve"] and _precision(cmd) == ("bf16", "int8", "bf16")
        served = build_parser().parse_args(cmd[3:])  # the server's own parser takes every option
        assert (served.dtype, served.quantize, served.kv_cache_dtype) == ("bf16", "int8", "bf16")
        assert (served.model_path, served.port, served.max_num_seqs) == ("ckpt-dir", 8000, args.max_num_seqs)


@pytest.mark.parametrize("template,fmt,no_repack", [("{{ x }}", "BF16", False), (None, "Q8_0", True),
                                                    (None, "Q8_0", False)])
def test_llama_server_peer_command(template, fmt, no_repack):
    """The llama-server peer (benchmark_serve.py --modes llama-server): -c is split across -np slots, so each slot
    gets the page's prompt and answer (rounded up to llama.cpp's 256); no host-RAM prompt cache; the given chat
    template, else llama.cpp's built-in detection (no Jinja); --no-repack when asked (Q8_0 on AMX, as the CLI peer)."""
    from bench.commands import llama_server_command

    cmd = llama_server_command("/bin", "/gguf", "ckpt", 8123, fmt, slots=4, slot_tokens=1012 + 64 + 257, threads=2,
                               template=template, no_repack=no_repack)
    arg = lambda flag: cmd[cmd.index(flag) + 1]  # noqa: E731
    assert cmd[0] == "/bin/llama-server" and arg("-m") == f"/gguf/ckpt-text-{fmt}.gguf"
    assert arg("--mmproj") == "/gguf/ckpt-mmproj-BF16.gguf"
    assert (arg("-np"), arg("-c"), arg("-t"), arg("--cache-ram"), arg("--port")) == ("4", str(4 * 1536), "2", "0",
                                                                                     "8123")
    assert (arg("--chat-template") == template and "--jinja" in cmd) if template else "--no-jinja" in cmd
    assert ("--no-repack" in cmd) == no_repack


def test_serve_benchmark_batch_worker_parses_its_mode(monkeypatch):
    """--modes batch runs the offline engine in a worker: its command line carries the mode and --max-num-seqs."""
    import argparse

    from bench import commands, run

    p = argparse.ArgumentParser()
    commands.add_serve_args(p)
    monkeypatch.setattr(run, "ensure_checkpoint", lambda model, ckpt: "ckpt-dir")
    monkeypatch.setattr("sys.argv", ["x", "--modes", "batch", "llama-server", "--max-num-seqs", "4",
                                     "--max-model-len", "1536"])
    args = run.parse_main_args(p, worker=None)
    assert args.modes == ["batch", "llama-server"]
    argv = [str(a) for a in commands.serve_infer_argv(args, "batch")]
    assert argv[argv.index("--worker-mode") + 1] == "batch" and argv[argv.index("--max-num-seqs") + 1] == "4"
    assert argv[argv.index("--max-model-len") + 1] == "1536"
    p = argparse.ArgumentParser()
    commands.add_serve_args(p)
    seen = []
    monkeypatch.setattr("sys.argv", ["x", *argv])
    with pytest.raises(SystemExit):
        run.parse_main_args(p, worker=lambda a: seen.append(a) or {})
    assert (seen[0].worker_mode, seen[0].max_num_seqs, seen[0].max_model_len) == ("batch", 4, 1536)


def test_deepseek_ocr2_hub_config_reads_as_the_same_model():
    """The remote-code config written for llama.cpp's converter (bench/real_size.py deepseek_ocr2_hub_config) from a
    transformers-5 DeepSeek-OCR-2 config describes the same model: ms_ocr reads both layouts to the same sizes."""
    from bench.real_size import deepseek_ocr2_hub_config
    from ms_ocr.models.deepseek_ocr2.config import DeepseekOCR2Config
    from tests.helpers.tiny_deepseek import tiny_config
    hf = tiny_config().to_dict()
    hub = deepseek_ocr2_hub_config(hf, "DeepseekOCR2ForCausalLM")
    assert hub["architectures"] == ["DeepseekOCR2ForCausalLM"] and hub["model_type"] == "deepseek_vl_v2"
    lang = hub["language_config"]
    assert lang["first_k_dense_replace"] == 1 and lang["qk_rope_head_dim"] == 16 and lang["use_mla"] is False
    a, b = DeepseekOCR2Config.from_dict(hf), DeepseekOCR2Config.from_dict(hub)
    assert (a.layout, b.layout) == ("transformers", "deepseek-ai")
    for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok",
                 "n_shared_experts", "mlp_layer_types", "rope_theta", "head_dim", "bos_token_id", "eos_token_id",
                 "tie_word_embeddings"):
        assert getattr(a.text, name) == getattr(b.text, name), name
    assert a.encoder.hidden_size == b.encoder.hidden_size == 48
    # the hub layout states SAM's width, depth, heads, global layers and downsampling (its MLP and neck widths are
    # the official constants, which the tiny model does not use)
    for name in ("dim", "depth", "heads", "global_layers", "downsample", "image_size"):
        assert a.sam[name] == b.sam[name], name
    assert a.sam["global_layers"] == (1, 3) and a.sam["downsample"] == (24, 48)
    assert b.image_token_id == a.image_token_id


def test_decode_bound_reads_each_columns_kv_cache_in_its_own_dtype(tiny_dir):
    """The process table's decode bound: the KV cache's bytes at the dtype each run held it in, as infer --json
    reports it (--kv-cache-dtype auto is bf16 under --quantize int8), and llama.cpp's default f16 cache; not fp32
    for every column whatever the runs held (the bound of a long int8 or bf16 answer came out too large)."""
    import argparse

    from bench.memory import checkpoint_text, decode_bounds, decode_weight_bytes, kv_bytes_per_token
    tensors, config = checkpoint_text(tiny_dir)
    args = argparse.Namespace(ckpt=tiny_dir, quantize="int8", dtype="auto", kv_cache_dtype="auto", new_tokens=64)
    med = {"ms_ocr CLI second run int8": {"prompt_tokens": 100, "kv_cache_dtype": "bf16"},
           "ms_ocr CLI first run int8": {"prompt_tokens": 100, "kv_cache_dtype": "fp32"},
           "llama.cpp Q8_0": {"prompt_tokens": 100}}
    bounds = decode_bounds(args, med, 10.0, tensors, config)
    int8 = decode_weight_bytes(tiny_dir, 1, tensors)
    per_position = kv_bytes_per_token(config["text_config"] if "text_config" in config else config, 2)
    assert per_position > 0
    assert bounds["ms_ocr CLI second run int8"][1] == int8 + per_position * 132  # 100 + 64 / 2 positions, 2 bytes
    assert bounds["ms_ocr CLI first run int8"][1] == int8 + 2 * per_position * 132
    assert bounds["ms_ocr CLI second run int8"][0] == 1000 * (int8 + per_position * 132) / 10e9
    llama = bounds["llama.cpp Q8_0"][1] - decode_weight_bytes(tiny_dir, 1.0625, tensors)
    assert abs(llama - per_position * 132) < 1e-6 * per_position
