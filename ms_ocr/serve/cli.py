"""OpenAI-compatible server: python -m ms_ocr.serve --model paddleocr-vl [--model-path DIR] [--port 8000].

Loads the model, compiles the decode graph (--warmup), starts the engine thread and serves FastAPI on uvicorn.
"""

import argparse
import contextlib
import os
import signal
import sys
import threading
import time

os.environ.setdefault("GLOG_v", "3")

import uvicorn  # noqa: E402

from ms_ocr import models  # noqa: E402
from ms_ocr.cli import (MAX_BATCH, CliError, Parser, add_device_args, add_mode_arg, add_output_args,  # noqa: E402
                        cli_main, load_pipeline, model_spec)

DEFAULT_MAX_MODEL_LEN = 12288  # room for PaddleX's default 8,192 completion tokens after a large page
API_KEY_ENV = "MS_OCR_API_KEY"  # the --api-key default (as vLLM's VLLM_API_KEY)


def build_parser():
    p = Parser(prog="python -m ms_ocr.serve", description="OpenAI-compatible chat-completions server for OCR VLMs.")
    p.add_argument("--model", required=True, help=", ".join(models.names()))
    p.add_argument("--model-path", help="checkpoint folder (hub download or ms_ocr.convert output)")
    p.add_argument("--served-model-name", help="model id clients use (default: the --model name)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-num-seqs", type=int, default=8,
                   help=f"sequences decoded together (cache slots, 1..{MAX_BATCH})")
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
    p.add_argument("--max-images-per-request", type=int, default=8, help="images one request may carry")
    p.add_argument("--max-request-pixels", type=int, default=64 * 10 ** 6,
                   help="decoded pixels of one request's images together (checked from their headers)")
    p.add_argument("--decode-pixel-budget", type=int, default=128 * 10 ** 6,
                   help="decoded pixels all requests together may hold while their images are decoded and resized "
                        "(~4 bytes each); a request waits for its share, 503 after 30 s")
    p.add_argument("--max-lines-per-request", type=int, default=128,
                   help="text lines a line-reading model (the demo) reads in one request")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV) or None,
                   help=f"clients must send 'Authorization: Bearer KEY' to /v1/* (default: ${API_KEY_ENV}; none: open)")
    p.add_argument("--max-connections", type=int, default=None,
                   help="open client connections at most (default: what the descriptor limit allows, less 64); at "
                        "the cap the oldest connection still sending its headers is closed first")
    p.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds a client may take to send a request's headers")
    p.add_argument("--body-timeout", type=float, default=60.0, help="seconds a client may take to send a request body")
    p.add_argument("--stall-timeout", type=float, default=30.0,
                   help="seconds a stream waits for a client that does not read it before dropping the request")
    add_mode_arg(p)
    add_device_args(p)
    add_output_args(p)
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
    """(ServerState, FastAPI app, worker) for a loaded pipeline; the worker is started (warm-up included). The
    state's spec is the checkpoint version's (its tasks and decoding defaults)."""
    spec = spec.for_checkpoint(pipe.model_dir)
    from ms_ocr.engine import BatchEngine
    from ms_ocr.generate import SamplingConfig
    from ms_ocr.serve.app import ServerState, create_app
    from ms_ocr.serve.media import DecodeBudget, MediaLimits
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
                         allow_private=args.allow_private_media_addresses, max_request_bytes=args.max_request_bytes,
                         max_images=args.max_images_per_request, max_request_pixels=args.max_request_pixels,
                         budget=DecodeBudget(args.decode_pixel_budget))
    state = ServerState(pipe, worker, name, max_len, limits, Metrics(name), created=int(time.time()),
                        api_key=args.api_key, max_lines=args.max_lines_per_request, body_timeout=args.body_timeout,
                        stall_timeout=args.stall_timeout, spec=spec)
    return state, create_app(state), worker


def uvicorn_config(args, app, **kw):
    """uvicorn's Config for the server: the guarded protocol (serve/connections.py: connection cap, header
    deadline) and a short grace period (requests in flight are answered at once on shutdown: worker.shutdown)."""
    from ms_ocr.serve.connections import connection_cap, guarded_protocol
    protocol = guarded_protocol(connection_cap(args.max_connections), args.header_timeout)
    return uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, http=protocol,
                          timeout_graceful_shutdown=5, **kw)


def check_args(args):
    for flag in ("max_num_seqs", "max_model_len", "max_image_bytes", "max_image_pixels", "max_request_bytes",
                 "max_images_per_request", "max_request_pixels", "decode_pixel_budget", "max_lines_per_request",
                 "max_connections"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise CliError(f"--{flag.replace('_', '-')} must be at least 1")
    if args.max_request_pixels > args.decode_pixel_budget:
        raise CliError(f"--max-request-pixels {args.max_request_pixels} exceeds --decode-pixel-budget "
                       f"{args.decode_pixel_budget}: such a request could never be decoded")
    for flag in ("header_timeout", "body_timeout", "stall_timeout"):
        if not 0 < getattr(args, flag) <= 3600:
            raise CliError(f"--{flag.replace('_', '-')} must be in (0, 3600] seconds")
    if args.api_key is not None and not args.api_key.strip():
        raise CliError("--api-key is empty")
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
    spec = spec.for_checkpoint(model_dir)  # the checkpoint version's tasks and decoding defaults
    _, pipe = load_pipeline(args, spec, model_dir)
    t0 = time.perf_counter()
    state, app, worker = build_server(args, pipe, spec)
    print(f"ms_ocr serving {state.model_name} on http://{args.host}:{args.port}/v1, its page at "
          f"http://{args.host}:{args.port}/ (loaded in "
          f"{pipe.load_seconds:.1f} s, warm-up {time.perf_counter() - t0:.1f} s, max-num-seqs {args.max_num_seqs}, "
          f"max-model-len {state.max_model_len})", file=sys.stderr, flush=True)
    if args.api_key is None and not _loopback(args.host):
        print(f"warning: serving on {args.host} without --api-key: anyone who can reach this address can use the "
              f"server (set --api-key or ${API_KEY_ENV})", file=sys.stderr, flush=True)
    server = _Server(uvicorn_config(args, app), worker)
    try:
        server.run()
    finally:
        worker.stop()
    return 0 if server.started else 1


def _loopback(host):
    import ipaddress
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Server(uvicorn.Server):
    """uvicorn's server, except that SIGINT/SIGTERM end it with exit status 0 (uvicorn re-raises the caught
    signal after its graceful shutdown, and a loaded ms_ocr process then died of SIGTERM, exit -15, instead of
    reaching cli_main's handling), and that on the signal every request in flight is answered at once
    (EngineWorker.shutdown: a JSON 503, or a stream's error chunk and [DONE]) before uvicorn's grace period
    would cut them with plain-text 500s; accept() failures are logged once (serve/connections.py)."""

    def __init__(self, config, worker=None):
        super().__init__(config)
        self.worker = worker

    async def startup(self, sockets=None):
        from ms_ocr.serve.connections import install_accept_errors
        install_accept_errors()
        await super().startup(sockets)

    def handle_exit(self, sig, frame):
        if self.worker is not None:
            self.worker.shutdown()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():  # a server in a thread (tests)
            yield
            return
        old = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


def main(argv=None):
    return cli_main(run, argv)
