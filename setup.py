import os

from setuptools import find_packages, setup

here = os.path.dirname(os.path.abspath(__file__))


# The demo checkpoint's files (ms_ocr/demo/paddleocr_vl)
DEMO_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "special_tokens_map.json",
              "tokenizer.json", "tokenizer_config.json", "model.safetensors")


def reqs(name):
    with open(os.path.join(here, name)) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


setup(
    name="ms_ocr",
    version="0.2.0",
    description="MindSpore-native inference for open OCR vision-language models (PaddleOCR-VL, ...)",
    packages=find_packages(include=["ms_ocr", "ms_ocr.*"]),
    # kernels.cc is compiled on first use (ms_ocr/ops/native); the demo checkpoint is the no-weights fallback (its
    # files by name: a training run's log beside it, training.json / .png, is not package data; the committed run's
    # is docs/journal/demo-training-log.json); the server's browser page is plain HTML, CSS and JavaScript (no build
    # step)
    package_data={"ms_ocr.ops.native": ["kernels.cc"],
                  "ms_ocr": ["demo/README.md", "serve/static/*", *("demo/paddleocr_vl/" + f for f in DEMO_FILES)]},
    python_requires=">=3.10",
    install_requires=reqs("requirements.txt"),
    extras_require={"test": reqs("requirements-test.txt"), "download": ["huggingface_hub"]},
    entry_points={"console_scripts": ["ms-ocr=ms_ocr.infer:main", "ms-ocr-batch=ms_ocr.batch.cli:main",
                                      "ms-ocr-pipeline=ms_ocr.pipeline.cli:main", "ms-ocr-serve=ms_ocr.serve.cli:main",
                                      "ms-ocr-export=ms_ocr.export.__main__:main",
                                      "ms-ocr-convert=ms_ocr.convert.__main__:main"]},
)
