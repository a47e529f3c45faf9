"""llama.cpp as the benchmark's CPU peer: convert a checkpoint folder to GGUF and time one page with
llama-mtmd-cli, in its own process, as scripts/benchmark.py times ms_ocr and transformers.

    python scripts/bench_llamacpp.py build                                  # once per machine (15-25 min, 2 cores)
    python scripts/bench_llamacpp.py build --isa avx2                       # a second build, AVX2/FMA only
    python scripts/bench_llamacpp.py convert --model paddleocr-vl --ckpt DIR --name NAME
    python scripts/bench_llamacpp.py time --model paddleocr-vl --name NAME --image page.png [--format BF16]

A benchmark dependency, never a runtime one. The build is the workplace's peer recipe
(shared/peers/llamacpp/peer.sh build: llama.cpp vendored in the llama-cpp-python 0.3.36 source package, CMake with
GGML_NATIVE, OpenMP, and its converter in a venv with transformers 4.x); `build` runs it (MS_OCR_LLAMACPP_PEER
names peer.sh where the shared folder is elsewhere). Conversion and timing are done here: the converter needs the
checkpoint's transformers-5 files adjusted (in a folder of links, never in the checkpoint; DeepSeek-OCR-2's config
rewritten in the deepseek-ai remote-code layout the converter reads, bench/real_size.py deepseek_ocr2_hub_config),
and the figures are read from llama.cpp's own log plus the kernel's accounting of the process (wall, peak RSS via
wait4). Models: paddleocr-vl, hunyuan-ocr, deepseek-ocr2 (llama.cpp's deepseek2-ocr text model and its
DeepSeek-OCR-2 projector, in the vendored 0.3.36 source).

Figures (one JSON object on stdout): vision_ms (the image encode), prefill_ms (llama_perf's prompt eval minus the
encode: it includes it), decode_ms_per_token, load_s (llama.cpp's model load), peak_rss_gb, wall_s, image_tokens,
prompt_tokens.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench.real_size import deepseek_ocr2_hub_config  # noqa: E402
from bench.report import parse_log  # noqa: E402

PEER = os.environ.get("PEER", os.path.join(os.path.expanduser("~"), ".cache", "llamacpp-peer"))
SRC = os.path.join(PEER, "llama_cpp_python-0.3.36", "vendor", "llama.cpp")
BIN = os.path.join(SRC, "build", "bin")
# ISA levels besides the native build (--isa): ggml's CMake switches for a build limited to that level, in its own
# folder (the ms_ocr side of the same comparison: MS_OCR_NATIVE_ARCH, see ms_ocr/ops/native)
ISA_BUILDS = {"avx2": ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
                       "-DGGML_BMI2=ON", "-DGGML_AVX512=OFF", "-DGGML_AVX512_VBMI=OFF", "-DGGML_AVX512_VNNI=OFF",
                       "-DGGML_AVX512_BF16=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
                       "-DGGML_AMX_BF16=OFF"]}


def bin_dir(isa="native"):
    return BIN if isa == "native" else os.path.join(SRC, f"build-{isa}", "bin")
GGUF = os.path.join(PEER, "gguf")
# PaddleOCR-VL's own chat template does not run in llama.cpp's template engine: the same prompt, written plainly
PADDLE_TEMPLATE = ("{{- '<|begin_of_sentence|>' -}}{%- for message in messages -%}{%- if message['role'] == 'user' -%}"
                   "{{- 'User: ' + message['content'] + '\\n' -}}{%- endif -%}{%- endfor -%}{{- 'Assistant: ' -}}")
PROMPTS = {"paddleocr-vl": "OCR:", "hunyuan-ocr": "OCR", "deepseek-ocr2": "Free OCR."}
# The converter run through a wrapper for a checkpoint whose BPE tokenizer it cannot identify (the benchmark's
# random DeepSeek-OCR-2 tokenizer: no pre-tokenizer hash it knows; ByteLevel with GPT-2's rule, which it names
# "gpt-2"); every other model runs the converter itself.
CONVERT_WRAPPER = """import runpy, sys
sys.path.insert(0, sys.argv[1])
import conversion.base as base
known = base.TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return known(self, tokenizer)
    except NotImplementedError:
        return "gpt-2"
base.TextModel.get_vocab_base_pre = pre
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def peer_script():
    path = os.environ.get("MS_OCR_LLAMACPP_PEER") or os.path.join(os.path.dirname(REPO), "shared", "peers",
                                                                  "llamacpp", "peer.sh")
    if not os.path.isfile(path):
        raise SystemExit(f"llama.cpp peer recipe not found at {path} (set MS_OCR_LLAMACPP_PEER)")
    return path


def available(isa="native"):
    """Whether llama.cpp is built here (the benchmark skips its column otherwise, saying why)."""
    return os.path.isfile(os.path.join(bin_dir(isa), "llama-mtmd-cli"))


def build(isa="native"):
    """The peer recipe's build (native), or, for another ISA level, the same source configured for that level in
    build-<isa> (the recipe's build first: it fetches and patches the source and makes the converter's venv)."""
    if isa == "native" or not os.path.isdir(SRC):
        subprocess.run(["bash", peer_script(), "build"], check=True)
    if isa != "native":
        out = os.path.join(SRC, f"build-{isa}")
        subprocess.run(["cmake", "-S", SRC, "-B", out, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_OPENMP=ON",
                        "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                        "-DLLAMA_BUILD_EXAMPLES=OFF", *ISA_BUILDS[isa]], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", out, f"-j{os.cpu_count()}", "--target", "llama-mtmd-cli"], check=True,
                       stdout=subprocess.DEVNULL)


def build_server():
    """llama-server from the recipe's build tree (the same configuration; its Web UI off: nothing to provision
    offline)."""
    if not available():
        build()
    out = os.path.dirname(BIN)
    subprocess.run(["cmake", "-S", SRC, "-B", out, "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", out, f"-j{os.cpu_count()}", "--target", "llama-server"], check=True,
                   stdout=subprocess.DEVNULL)


def server_available():
    return os.path.isfile(os.path.join(BIN, "llama-server"))


def server_command(model, name, port, fmt="BF16", slots=4, slot_tokens=2048, threads=2):
    """llama-server for GGUF NAME of `model` on 127.0.0.1:PORT (bench/commands.py llama_server_command): the CLI
    peer's chat templates (run_page) and its --no-repack rule for Q8_0 on a CPU with AMX."""
    from bench.commands import llama_server_command
    return llama_server_command(BIN, GGUF, name, port, fmt, slots, slot_tokens, threads,
                                PADDLE_TEMPLATE if model == "paddleocr-vl" else None,
                                no_repack=fmt != "BF16" and cpu_has_amx())


def _edit_json(path, edit):
    """Rewrite a JSON file of the link folder (replacing a link into the checkpoint, never writing through it)."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        data = json.load(f)
    edit(data)
    os.remove(path)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def _tokenizer_config(d):
    """transformers 5 writes a tokenizer class and a list of extra special tokens that 4.x cannot read."""
    if d.get("tokenizer_class") == "TokenizersBackend":
        d["tokenizer_class"] = "PreTrainedTokenizerFast"
    extra = d.pop("extra_special_tokens", None)
    if isinstance(extra, list) and extra:
        d.setdefault("additional_special_tokens", extra)
    d.pop("model_specific_special_tokens", None)


# DeepSeek-OCR-2's architecture names as the converter registers them: its text model only under DeepSeek-OCR's name
# (the same DeepSeek-V2 decoder), the projector under its own
DEEPSEEK_OCR2_ARCHS = {"text": "DeepseekOCRForCausalLM", "mmproj": "DeepseekOCR2ForCausalLM"}


def convert(model, ckpt, name):
    """GGUF text BF16 and Q8_0 and vision (mmproj) BF16 of a checkpoint folder, into PEER/gguf/NAME-*."""
    folder = os.path.join(PEER, "models", name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    os.makedirs(GGUF, exist_ok=True)
    for entry in os.listdir(ckpt):
        os.symlink(os.path.realpath(os.path.join(ckpt, entry)), os.path.join(folder, entry))
    _edit_json(os.path.join(folder, "tokenizer_config.json"), _tokenizer_config)
    if model == "paddleocr-vl":  # routes --mmproj to the PaddleOCR vision converter
        _edit_json(os.path.join(folder, "config.json"),
                   lambda d: d.setdefault("vision_config", {}).__setitem__("architectures", ["PaddleOCRVisionModel"]))
    pre = os.path.join(folder, "preprocessor_config.json")
    src = pre if os.path.exists(pre) else os.path.join(folder, "processor_config.json")
    with open(src) as f:
        proc = json.load(f)
    proc = proc.get("image_processor", proc)
    size = proc.get("size", {})
    proc.setdefault("min_pixels", size.get("shortest_edge"))  # the names the 4.x converter reads
    proc.setdefault("max_pixels", size.get("longest_edge"))
    if os.path.lexists(pre):
        os.remove(pre)
    with open(pre, "w") as f:
        json.dump(proc, f, indent=1)
    py = os.path.join(PEER, "venv", "bin", "python")
    env = dict(os.environ, OMP_NUM_THREADS="2")
    log = open(os.path.join(PEER, f"convert-{name}.log"), "w")
    text, mmproj = (os.path.join(GGUF, f"{name}-{part}") for part in ("text-BF16.gguf", "mmproj-BF16.gguf"))
    config = os.path.join(folder, "config.json")
    with open(config) as f:
        hf_config = json.load(f)
    for extra, out, part in (([], text, "text"), (["--mmproj"], mmproj, "mmproj")):
        launcher = [py, os.path.join(SRC, "convert_hf_to_gguf.py")]
        if model == "deepseek-ocr2":
            arch = DEEPSEEK_OCR2_ARCHS[part]
            _edit_json(config, lambda d, arch=arch: (d.clear(), d.update(deepseek_ocr2_hub_config(hf_config, arch))))
            launcher = [py, "-c", CONVERT_WRAPPER, SRC, os.path.join(SRC, "convert_hf_to_gguf.py")]
        subprocess.run([*launcher, folder, *extra, "--outtype", "bf16", "--outfile", out], check=True, stdout=log,
                       stderr=log, env=env)
    subprocess.run([os.path.join(BIN, "llama-quantize"), text, text.replace("BF16", "Q8_0"), "Q8_0"], check=True,
                   stdout=log, stderr=log)


def converted(name):
    return all(os.path.isfile(os.path.join(GGUF, f"{name}-{p}")) for p in ("text-BF16.gguf", "mmproj-BF16.gguf"))


def ensure_converted(model, ckpt):
    """The GGUF name of checkpoint folder `ckpt` (its folder name), converted first if it is not yet."""
    name = os.path.basename(os.path.normpath(ckpt))
    if not converted(name):
        print(f"converting {ckpt} to GGUF for llama.cpp ...", flush=True)
        convert(model, ckpt, name)
    return name


def context_size(new_tokens, prompt=2048):
    """llama.cpp's -c for a page's prompt (the pages here: ~800-1,000 image tokens; `prompt` leaves room for up to
    2,048) and `new_tokens` forced tokens, a multiple of 256: 4,096 up to 2,048 tokens, as before."""
    return max(4096, -(-(prompt + new_tokens) // 256) * 256)


def run_page(model, name, image, fmt="BF16", new_tokens=32, threads=2, isa="native"):
    """One timed llama-mtmd-cli run (its own process): the figures described at the top of this file."""
    cmd = [os.path.join(bin_dir(isa), "llama-mtmd-cli"), "-m", os.path.join(GGUF, f"{name}-text-{fmt}.gguf"), "--mmproj",
           os.path.join(GGUF, f"{name}-mmproj-BF16.gguf"), "--image", image, "-p", PROMPTS[model], "-n",
           str(new_tokens), "--temp", "0", "--ignore-eos", "-t", str(threads), "-c", str(context_size(new_tokens)),
           "-lv", "4"]
    if model == "paddleocr-vl":
        cmd += ["--jinja", "--chat-template", PADDLE_TEMPLATE]
    elif model == "deepseek-ocr2":  # the converter's template (the messages' text as it is) runs only under --jinja
        cmd.append("--jinja")
    no_repack = fmt != "BF16" and isa == "native" and cpu_has_amx()
    if no_repack:
        # ggml's AMX kernels take Q8_0 matrices on a CPU with AMX, and on the Xeon KVM guests here they end in an
        # illegal instruction (gdb, 2026-11-27: `tilezero` in tinygemm_kernel_amx<block_q8_0>; a standalone
        # program's tile instructions run): --no-repack keeps Q8_0 on ggml's AVX-512 VNNI dot products, the path
        # a CPU without AMX (the Zen 4 of the reference figures) runs
        cmd.append("--no-repack")
    t0 = time.perf_counter()
    out, code, usage = run_measured(cmd)
    wall = time.perf_counter() - t0
    if code:
        raise SystemExit(f"llama-mtmd-cli failed ({code}):\n{out[-3000:]}")
    return parse_log(out) | {"wall_s": wall, "peak_rss_gb": usage.ru_maxrss / 2 ** 20, "format": fmt,
                             "threads": threads, "isa": isa, "no_repack": no_repack}


def cpu_has_amx():
    try:
        with open("/proc/cpuinfo") as f:
            return " amx_int8" in f.read()
    except OSError:
        return False


def run_measured(cmd, env=None):
    """(output, exit code, rusage) of a command run to its end: the kernel's own accounting of that process
    (wait4), e.g. its peak RSS."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    return out, proc.returncode, usage


def main():
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=["build", "build-server", "convert", "time"])
    p.add_argument("--model", choices=sorted(PROMPTS), default="paddleocr-vl")
    p.add_argument("--ckpt")
    p.add_argument("--name")
    p.add_argument("--image")
    p.add_argument("--format", default="BF16", choices=["BF16", "Q8_0"])
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--isa", choices=["native", *ISA_BUILDS], default="native",
                   help="the build: native (GGML_NATIVE) or limited to an ISA level (build-<isa>)")
    args = p.parse_args()
    if args.action == "build":
        build(args.isa)
    elif args.action == "build-server":
        build_server()
    elif args.action == "convert":
        convert(args.model, args.ckpt, args.name)
    else:
        print(json.dumps(run_page(args.model, args.name, args.image, args.format, args.new_tokens, args.threads,
                                  args.isa)))


if __name__ == "__main__":
    sys.exit(main())
