"""The benchmarks' arithmetic over measured runs (the benchmark scripts import it; tests/test_benchmark_report.py
checks it): medians over rounds, ratios, token agreement, the process table, llama.cpp's log figures."""

import json
import os
import re

import numpy as np


def median_result(runs):
    """One framework's figures over rounds: the median of every measured (float) figure and of every compile
    time; counts (patches, prompt tokens) and tokens from the first round."""
    out = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, float):
            out[key] = float(np.median([r[key] for r in runs]))
    if "compile_s" in out:
        out["compile_s"] = {k: float(np.median([r["compile_s"][k] for r in runs])) for k in runs[0]["compile_s"]}
    return out


def round_ratios(results):
    """A round's ms_ocr / transformers ratios: vision + prefill time, and decode tokens/s."""
    ms, tf = results["ms_ocr"], results["transformers"]
    return {"vision_prefill": (ms["vision_ms"] + ms["prefill_ms"]) / (tf["vision_ms"] + tf["prefill_ms"]),
            "decode_speedup": ms["decode_tokens_per_s"] / tf["decode_tokens_per_s"],
            "rss": ms["peak_rss_gb"] / tf["peak_rss_gb"]}


def tokens_agreement(results):
    """How many of the greedy tokens ms_ocr and transformers agree on, as "same/total"."""
    ms, tf = results["ms_ocr"]["tokens"], results["transformers"]["tokens"]
    return f"{sum(a == b for a, b in zip(ms, tf))}/{len(ms)}"


PROCESS_ROWS = (("process wall s", "wall_s"), ("load s", "load_s"), ("compile s", "compile_s"),
                ("vision ms", "vision_ms"), ("prefill ms", "prefill_ms"), ("decode ms/token", "decode_ms_per_token"),
                ("peak RSS GB", "peak_rss_gb"), ("prompt tokens", "prompt_tokens"))


def process_report(columns):
    """What a user waits for, one process per runtime: a table with each ms_ocr column's ratio to the first
    llama.cpp column."""
    names = list(columns)
    med = {n: {k: (float(np.median([r[k] for r in runs if r.get(k) is not None]))
                   if any(r.get(k) is not None for r in runs) else None) for _, k in PROCESS_ROWS}
           for n, runs in columns.items()}
    peer = next((n for n in names if n.startswith("llama.cpp")), None)
    head = f"{'figure':<17}" + "".join(f"{n:>22}" for n in names)
    print(head + (f"{'ratios to ' + peer:>40}" if peer else ""))
    for label, key in PROCESS_ROWS:
        cells = "".join(f"{'-' if med[n][key] is None else format(med[n][key], '.2f'):>22}" for n in names)
        ratios = ""
        if peer and med[peer][key]:
            ratios = "  " + ", ".join(f"{med[n][key] / med[peer][key]:.2f}" for n in names
                                      if n != peer and med[n][key] is not None)
        print(f"{label:<17}{cells}{ratios}")
    return med


def parse_log(text):
    """llama.cpp's figures from its log (-lv 4). Its 'prompt eval time' spans the image encode too."""
    def num(rx):
        m = re.search(rx, text)
        return float(m.group(1)) if m else None
    enc = [float(x) for x in re.findall(r"(?:image slice encoded in|mtmd batch encoding done in) (\d+) ms", text)]
    ntok = [int(x) for x in re.findall(r"decoding image batch \d+/\d+, n_tokens_batch = (\d+)", text)]
    prompt = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", text)
    decode = re.search(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs\s*\(\s*([\d.]+) ms per token", text)
    vision_ms = sum(enc) if enc else None
    prompt_ms = float(prompt.group(1)) if prompt else None
    return {"framework": "llama.cpp", "vision_ms": vision_ms,
            "prefill_ms": prompt_ms - vision_ms if prompt_ms is not None and vision_ms is not None else None,
            "decode_ms_per_token": float(decode.group(3)) if decode else None,
            "decode_tokens_per_s": 1000 / float(decode.group(3)) if decode else None,
            "load_s": (num(r"load time =\s*([\d.]+) ms") or 0) / 1000 or None,
            "image_tokens": sum(ntok) if ntok else None, "prompt_tokens": int(prompt.group(2)) if prompt else None}


def print_table(columns, rows):
    """A fixed-width table: columns = [(title, width, format spec)], rows = value tuples in column order. Cells
    align right; a spec starting with "<" aligns the column left, one ending in "x" prints a ratio ("1.25x");
    None prints "-"."""
    def cell(text, width, spec):
        return f"{text:<{width}}" if spec.startswith("<") else f"{text:>{width}}"

    print("".join(cell(title, width, spec) for title, width, spec in columns))
    for row in rows:
        out = []
        for (_, width, spec), value in zip(columns, row):
            fmt = spec.lstrip("<")
            text = "-" if value is None else format(value, fmt[:-1]) + "x" if fmt.endswith("x") else format(value, fmt)
            out.append(cell(text, width, spec))
        print("".join(out))


def write_json(folder, name, payload):
    """The benchmark's figures as `folder/name` (indented JSON); prints and returns the path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        json.dump(payload, f, indent=1)
    print(f"wrote {path}")
    return path
