"""Resident memory and KV-cache size over a long Unlimited-OCR answer (ms_ocr/models/unlimited_ocr/README.md's table):
a tiny random checkpoint (bench/tiny_unlimited.py; --decoder large: the real attention shape, 12 layers of
10 x 128 heads) decodes --tokens tokens with ignore_eos through the engine; every 500 tokens it prints the process's
resident memory and the layer-0 cache's shape.

    python scripts/measure_window_memory.py --decoder large --window 128 --tokens 4000
    python scripts/measure_window_memory.py --decoder large --window 1048576 --tokens 4000   # = full attention
"""

import argparse
import subprocess
import tempfile
import time

LARGE = dict(hidden_size=1280, num_attention_heads=10, num_key_value_heads=10, num_hidden_layers=12,
             intermediate_size=1024, moe_intermediate_size=64, mlp_layer_types=["dense"] + ["sparse"] * 11)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--decoder", choices=("tiny", "large"), default="tiny")
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--tokens", type=int, default=4000)
    args = p.parse_args()

    import mindspore as ms

    from ms_ocr import models
    from ms_ocr.engine import BatchEngine, Request
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.proc import rss_gb
    from bench import tiny_unlimited as tu
    from bench.pages import text_page

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    folder = tu.make_checkpoint(tempfile.mkdtemp(prefix="unlimited_memory_"), window=args.window,
                                text=LARGE if args.decoder == "large" else None)
    pipe = models.get("unlimited-ocr").load(folder, "CPU", "fp32", mode="base")
    layer = pipe.runtime.model.text_layers()[0].self_attn
    count = [0]

    def on_token(tok):
        count[0] += 1
        if count[0] in (1, 100) or count[0] % 500 == 0:
            print(f"token {count[0]:5d}  rss {rss_gb() * 1024:8.1f} MB  cache {tuple(layer.k_cache.shape)}", flush=True)
        return False

    engine = BatchEngine(pipe, SamplingConfig(max_new_tokens=args.tokens), max_batch_size=1, max_input_length=128,
                         max_output_length=args.tokens, ignore_eos=True)
    t0 = time.perf_counter()
    engine.run([Request("page", [text_page(300, 200, "12.50 EUR").convert("RGB")], "document parsing.",
                        on_token=on_token, ignore_eos=True)], lambda req, res, err: None if err is None else print(err))
    model_name = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((line.split(":", 1)[1].strip() for line in model_name.splitlines()
                       if line.startswith("Model name")), "unknown CPU")
    print(f"{model_name}: {args.tokens} tokens in {time.perf_counter() - t0:.0f} s, cache slots {engine.slots}, "
          f"cache {pipe.runtime.cache_bytes(1, engine.slots) / 2 ** 20:.1f} MB; checkpoint {folder}")


if __name__ == "__main__":
    main()
