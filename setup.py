import importlib.util
import os

from setuptools import Distribution, find_packages, setup
from setuptools.command.build_ext import build_ext

here = os.path.dirname(os.path.abspath(__file__))


# The demo checkpoint's files (ms_ocr/demo/paddleocr_vl)
DEMO_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "special_tokens_map.json",
              "tokenizer.json", "tokenizer_config.json", "model.safetensors")


def reqs(name):
    with open(os.path.join(here, name)) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def kernel_libraries():
    """ms_ocr/ops/native/libraries.py, loaded by its path: it imports nothing from ms_ocr, whose requirements are not
    installed in the build environment."""
    spec = importlib.util.spec_from_file_location("ms_ocr_kernel_libraries",
                                                  os.path.join(here, "ms_ocr", "ops", "native", "libraries.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildKernels(build_ext):
    """The native CPU kernels compiled with the machine's C++ compiler, one library per ISA level (libraries.py): into
    the package in the build tree (pip install .), or in place for an editable install (pip install -e .). A library
    the source tree already holds for these sources (scripts/ensure_env.sh built it) is copied, not compiled again.
    Without a compiler the install goes on and says so in one line; ms_ocr then runs on MindSpore's kernels."""

    def run(self):
        super().run()  # no Python extensions
        libraries = kernel_libraries()
        if self.inplace:
            libraries.install(libraries.LIB_DIR)
            return
        built, _ = libraries.install(os.path.join(self.build_lib, "ms_ocr", "ops", "native", "lib"),
                                     reuse=libraries.LIB_DIR)
        self._kernel_outputs = [path for lib in built for path in (lib, lib[:-3] + ".json")]

    def get_outputs(self):
        return super().get_outputs() + getattr(self, "_kernel_outputs", [])


class BinaryDistribution(Distribution):
    """A distribution with compiled libraries: its wheel is tagged for this platform."""

    def has_ext_modules(self):
        return True


setup(
    name="ms_ocr",
    version="0.2.0",
    description="MindSpore-native inference for open OCR vision-language models (PaddleOCR-VL, ...)",
    packages=find_packages(include=["ms_ocr", "ms_ocr.*"]),
    # the native kernels' sources ship beside the libraries BuildKernels compiles from them (python -m
    # ms_ocr.ops.native builds them again after a compiler is installed); the demo checkpoint is the no-weights
    # fallback (its files by name: a training run's log beside it, training.json / .png, is not package data; the
    # committed run's is docs/journal/demo-training-log.json); the server's browser page is plain HTML, CSS and
    # JavaScript (no build step)
    package_data={"ms_ocr.ops.native": ["*.cc", "*.h", "arch/*/*.cc", "arch/*/*.h"],
                  "ms_ocr": ["demo/README.md", "serve/static/*", *("demo/paddleocr_vl/" + f for f in DEMO_FILES)]},
    python_requires=">=3.10",
    install_requires=reqs("requirements.txt"),
    extras_require={"test": reqs("requirements-test.txt"), "download": ["huggingface_hub"]},
    cmdclass={"build_ext": BuildKernels},
    distclass=BinaryDistribution,
    entry_points={"console_scripts": ["ms-ocr=ms_ocr.infer:main", "ms-ocr-batch=ms_ocr.batch.cli:main",
                                      "ms-ocr-pipeline=ms_ocr.pipeline.cli:main", "ms-ocr-serve=ms_ocr.serve.cli:main",
                                      "ms-ocr-export=ms_ocr.export.__main__:main",
                                      "ms-ocr-convert=ms_ocr.convert.__main__:main"]},
)
