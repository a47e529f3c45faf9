"""Train the embedded demo model: a tiny PaddleOCR-VL (transformers' own class) on rendered text lines.

    python scripts/train_demo.py --out ms_ocr/demo/paddleocr_vl --steps 10800 --eval-every 1000 --minutes 60 \
        --precision bf16 --text-layers 3 --text-intermediate 512

(the committed checkpoint's command: 60 minutes on two cores of an AVX512_BF16 CPU, where the clock stopped it at
step 9,365; `--stop-after 9365` with a larger --minutes repeats it on a slower CPU; see ms_ocr/demo/README.md)

Test-only dependencies (torch, transformers, tokenizers); fonts from training/demo/font_files/ (training/demo/fonts.py). The run is
deterministic for a seed, a step count, a thread count and a CPU type (--minutes only stops it early; --stop-after
stops at a given step, to repeat such a run). It writes the checkpoint in the hub's layout (flat config.json, bf16
safetensors, tokenizer.json, tokenizer_config.json with the chat template, preprocessor_config.json) plus
training.json (loss curve, CER figures) and training.png beside it.

The code is in training/demo/: data.py (rendered lines), tokenizer.py, model.py (configuration, batcher, export),
loop.py (the loop and this command line).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from training.demo.loop import main  # noqa: E402

if __name__ == "__main__":
    main()
