"""OpenAI-compatible server: python -m ms_ocr.serve --model paddleocr-vl [--model-path DIR] [--port 8000].

Loads the model, compiles the decode graph (--warmup), starts the engine thread and serves FastAPI on uvicorn.
"""

import argparse
import contextlib
import os
import signal
import sys
import time

os.environ.setdefault("GLOG_v", "3")

import uvicorn  # noqa: E402

from ms_ocr import models  # noqa: E402
from ms_ocr.cli import CliError, Parser, add_device_args, add_mode_arg, cli_main, model_spec  # noqa: E402

DEFAULT_MAX_MODEL_LEN = 12288  # room for PaddleX's default 8,192 completion tokens after a large page


def build_parser():
    p = Parser(prog="python -m ms_ocr.serve", description="OpenAI-compatible chat-completions server for OCR VLMs.")
    p.add_argument("--model", required=True, help=", ".join(models.names()))
    p.add_argument("--model-path", help="checkpoint folder (hub download or ms_ocr.convert output)")
    p.add_argument("--served-model-name", help="model id clients use (default: the --model name)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-num-seqs", type=int, default=8, help="sequences decoded together (cache slots)")
    p.add_argument("--max-queue", type=int, default=64,
                   help="accepted requests waiting for a slot; beyond max-num-seqs + max-queue the server answers 503")
    p.add_argument("--max-model-len", type=int, default=None,
                   help=f"prompt + completion tokens per request (default {DEFAULT_MAX_MODEL_LEN}, or the model's "
                        "max_position_embeddings if smaller); the decode step attends over this many cache slots")
    p.add_argument("--allowed-local-media-path", metavar="DIR", help="folder file:// image URLs may read from")
    p.add_argument("--allowed-media-domains", nargs="+", metavar="HOST", default=(),
                   help="host names http(s) image URLs may name ('*': any public host); default: none, remote "
                        "images are refused. Loopback, private and link-local addresses stay refused")
    p.add_argument("--allow-private-media-addresses", action="store_true",
                   help="let the allowed hosts resolve to loopback/private/link-local addresses (an intranet "
                        "image store); any client can then make the server fetch from inside your network")
    p.add_argument("--media-fetch-timeout", type=float, default=10.0,
                   help="seconds a whole http(s) image fetch may take (connect, redirects, every byte)")
    p.add_argument("--max-request-bytes", type=int, default=64 * 2 ** 20, help="largest request body accepted")
    p.add_argument("--max-image-bytes", type=int, default=32 * 2 ** 20, help="largest encoded image accepted")
    p.add_argument("--max-image-pixels", type=int, default=64 * 10 ** 6, help="largest decoded width x height")
    add_mode_arg(p)
    add_device_args(p)
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                   help="compile the graphs with one small request before serving (default on)")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level")
    return p


def warmup_request(spec, pipe):
    """A two-token request on a blank page: compiles vision, prefill and the decode step before serving."""
    from PIL import Image

    from ms_ocr.engine import Request
    from ms_ocr.generate import SamplingConfig
    page = Image.new("RGB", (448, 448), (255, 255, 255))
    return Request("warmup", [page], next(iter(spec.tasks.values())),
                   sampling=SamplingConfig(max_new_tokens=2))


def build_server(args, pipe, spec):
    """(ServerState, FastAPI app, worker) for a loaded pipeline; the worker is started (warm-up included)."""
    from ms_ocr.engine import BatchEngine
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.serve.app import ServerState, create_app
    from ms_ocr.serve.media import MediaLimits
    from ms_ocr.serve.metrics import Metrics
    from ms_ocr.serve.worker import EngineWorker

    max_len = args.max_model_len or min(DEFAULT_MAX_MODEL_LEN, pipe.runtime.max_positions)
    try:
        engine = BatchEngine(pipe, SamplingConfig(), args.max_num_seqs, max_len - 1, max_len - 1,
                             max_model_len=max_len, pack_vision=False)
    except ValueError as e:
        raise CliError(f"--max-model-len {max_len}: {e}") from None
    worker = EngineWorker(engine, args.max_queue, warmup_request(spec, pipe) if args.warmup else None)
    worker.start()
    name = args.served_model_name or args.model
    limits = MediaLimits(max_bytes=args.max_image_bytes, max_pixels=args.max_image_pixels,
                         allowed_local_path=args.allowed_local_media_path,
                         allowed_domains=tuple(args.allowed_media_domains), fetch_timeout=args.media_fetch_timeout,
                         allow_private=args.allow_private_media_addresses, max_request_bytes=args.max_request_bytes)
    state = ServerState(pipe, worker, name, max_len, limits, Metrics(name), created=int(time.time()))
    return state, create_app(state), worker


def check_args(args):
    for flag in ("max_num_seqs", "max_model_len", "max_image_bytes", "max_image_pixels", "max_request_bytes"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise CliError(f"--{flag.replace('_', '-')} must be at least 1")
    if not 0 < args.media_fetch_timeout <= 600:
        raise CliError("--media-fetch-timeout must be in (0, 600] seconds")
    if args.max_queue < 0:
        raise CliError("--max-queue must be >= 0")
    if not 0 <= args.port <= 65535:
        raise CliError("--port must be in 0..65535")
    if args.max_model_len is not None and args.max_model_len < 2:
        raise CliError("--max-model-len must be at least 2")
    if args.allowed_local_media_path and not os.path.isdir(args.allowed_local_media_path):
        raise CliError(f"--allowed-local-media-path {args.allowed_local_media_path} is not a folder")


def run(argv):
    args = build_parser().parse_args(argv)
    check_args(args)
    spec = model_spec(args)
    from ms_ocr.weights import locate
    model_dir = locate(args.model, args.model_path)
    from ms_ocr.device import setup
    target = setup(args.device, args.threads)
    pipe = spec.load(model_dir, target, args.dtype, quantize=args.quantize,
                     kv_cache_dtype=args.kv_cache_dtype)
    if args.mode:
        pipe.processor.set_mode(args.mode)
    t0 = time.perf_counter()
    state, app, worker = build_server(args, pipe, spec)
    print(f"ms_ocr serving {state.model_name} on http://{args.host}:{args.port}/v1 (loaded in "
          f"{pipe.load_seconds:.1f} s, warm-up {time.perf_counter() - t0:.1f} s, max-num-seqs {args.max_num_seqs}, "
          f"max-model-len {state.max_model_len})", file=sys.stderr, flush=True)
    server = _Server(uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                                    timeout_graceful_shutdown=5))
    try:
        server.run()
    finally:
        worker.stop()
    return 0 if server.started else 1


class _Server(uvicorn.Server):
    """uvicorn's server, except that SIGINT/SIGTERM end it with exit status 0: uvicorn re-raises the caught
    signal after its graceful shutdown, and a loaded ms_ocr process then died of SIGTERM (exit -15, seen on
    SIGINT here) instead of reaching cli_main's handling."""

    @contextlib.contextmanager
    def capture_signals(self):
        old = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


def main(argv=None):
    return cli_main(run, argv)
