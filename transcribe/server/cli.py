"""`transcribe serve`: the OpenAI-compatible server in a process of its own.

    transcribe serve [--model M]... [--host 127.0.0.1] [--port 8000] [--api-key KEY]
                     [--max-upload-mb 200] [--max-batch 8] [--batch-wait-ms 5] [--workers-threads N]
                     [--device cpu|cuda] [--dtype T] [--log-level info]

Exit status: 0 after a clean shutdown on Ctrl-C (on SIGTERM the process ends by that signal once shut
down cleanly, as uvicorn lets it); 2 for a usage error, a model that cannot
be loaded or an address that cannot be listened on; 1 for an internal error.
"""
from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from typing import Optional

from ..cli_args import add_dtype_argument, positive_int as _positive_int
from ..errors import TranscribeError

PROG = "transcribe serve"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Serve models over HTTP: OpenAI's audio API (/v1/audio/transcriptions, /translations, "
                    "/v1/models), live streaming over a WebSocket (/v1/audio/stream) and /health.",
        epilog="Needs the server extra: pip install \"transcribe[server]\". Exit status: 0 clean shutdown, "
               "2 usage error / bad model / address in use, 1 internal error.")
    p.add_argument("-m", "--model", action="append", metavar="M",
                   help="a model to serve (file, directory, short name or hub id); repeat for several; its id "
                        "in the API is the name given here (default: Whisper tiny.en, installed with the package)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8000, help="default: 8000 (0: any free port, printed at start)")
    p.add_argument("--api-key", default=os.environ.get("TRANSCRIBE_API_KEY"), metavar="KEY",
                   help="require 'Authorization: Bearer KEY' on every endpoint but /health "
                        "(default: $TRANSCRIBE_API_KEY; none: no key is asked)")
    p.add_argument("--max-upload-mb", type=_positive_float, default=200.0, metavar="MB",
                   help="largest request body accepted; larger ones get 413 unread (default: 200)")
    p.add_argument("--max-audio-minutes", type=_positive_float, default=180.0, metavar="MIN",
                   help="longest audio an upload may decode to: refused from its header where it tells the "
                        "length, else when decoding passes it (default: 180)")
    p.add_argument("--max-batch", type=_positive_int, default=8, metavar="N",
                   help="concurrent requests run together as one batch, at most N (default: 8; 1: no batching)")
    p.add_argument("--batch-wait-ms", type=float, default=5.0, metavar="MS",
                   help="how long an idle server waits for more requests to batch with the first (default: 5)")
    p.add_argument("--workers-threads", type=_positive_int, default=None, metavar="N",
                   help="CPU threads the models run on (default: PyTorch's, one per core)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="default: cpu")
    add_dtype_argument(p)
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                   help="default: info (one line per request)")
    return p


def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {s!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {s}")
    return v


def _say(msg: str) -> None:
    print(f"transcribe: {msg}", file=sys.stderr, flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    if not 0 <= args.port <= 65535:
        _say(f"error: --port must lie between 0 and 65535, got {args.port}")
        return 2
    if args.batch_wait_ms < 0:
        _say("error: --batch-wait-ms must not be negative")
        return 2
    names = args.model or [None]
    if len(set(names)) != len(names):
        _say("error: a --model is given twice")
        return 2
    import importlib.util

    missing = [name for name, module in (("fastapi", "fastapi"), ("uvicorn", "uvicorn"),
                                         ("python-multipart", "multipart")) if importlib.util.find_spec(module) is None]
    if missing:
        _say(f"error: the server needs its extra: pip install \"transcribe[server]\" ({', '.join(missing)} missing)")
        return 2

    sock = _listen(args.host, args.port)
    if isinstance(sock, str):
        _say(f"error: {sock}")
        return 2

    import transcribe
    from ..hub import DEFAULT_MODEL
    from ..runtime import configure_process

    logging.basicConfig(level=getattr(logging, args.log_level.upper()), format="transcribe: %(message)s")
    configure_process(args.workers_threads)  # the server is a program of its own
    from ..audio import set_max_audio_seconds

    set_max_audio_seconds(args.max_audio_minutes * 60)  # every upload this process decodes
    models = {}
    for name in names:
        try:
            model = transcribe.load_model(name, device=args.device, dtype=args.dtype, threads=args.workers_threads)
        except TranscribeError as e:
            sock.close()
            _say(f"error: {' '.join(str(e).split())}")
            return 2
        models[name or DEFAULT_MODEL] = model

    from .app import create_app
    from .engine import Engine
    from .websocket import MAX_FRAME_BYTES

    engine = Engine(models, max_batch=args.max_batch, wait_ms=args.batch_wait_ms)
    app = create_app(engine, api_key=args.api_key, max_upload_mb=args.max_upload_mb)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    _say(f"serving {', '.join(models)} at http://{shown}:{port}/v1 (live: ws://{shown}:{port}/v1/audio/stream)")
    if not args.api_key:
        where = "this machine only" if _loopback(args.host) else "EVERY host that can reach this address"
        _say(f"no --api-key: requests are not authenticated; listening on {args.host} ({where})")
    import uvicorn

    config = uvicorn.Config(app, log_level=args.log_level, access_log=args.log_level in ("debug", "info"),
                            ws_max_size=MAX_FRAME_BYTES + 4096, ws_max_queue=16,
                            timeout_graceful_shutdown=5, lifespan="on")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    return 0


def _loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


def _listen(host: str, port: int):
    """A listening socket on host:port, or why there cannot be one."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return f"cannot listen on {host}:{port}: {e.strerror or e}"
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        sock.close()
        return f"cannot listen on {host}:{port}: {e.strerror or e}"
    sock.set_inheritable(True)
    return sock
