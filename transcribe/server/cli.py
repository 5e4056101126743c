"""`transcribe serve`: the OpenAI-compatible server in a process of its own.

    transcribe serve [--model M]... [--diarizer M] [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--insecure-no-key]
                     [--allowed-hosts NAME]... [--allowed-origins ORIGIN]...
                     [--max-upload-mb 200] [--max-connections 500] [--header-timeout-s 10] [--keep-alive-s 5]
                     [--stream-idle-s 300] [--max-batch 8] [--batch-wait-ms 5] [--workers-threads N]
                     [--device cpu|cuda] [--dtype T] [--no-ui] [--log-level info]

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
from . import limits

PROG = "transcribe serve"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Serve models over HTTP: OpenAI's audio API (/v1/audio/transcriptions, /translations, "
                    "/v1/models), live streaming over a WebSocket (/v1/audio/stream), /health and a web page "
                    "(http://HOST:PORT/: a file or the microphone, transcribed in the browser).",
        epilog="Needs the server extra: pip install \"transcribe[server]\". Exit status: 0 clean shutdown, "
               "2 usage error / bad model / address in use, 1 internal error.")
    p.add_argument("-m", "--model", action="append", metavar="M",
                   help="a model to serve (file, directory, short name or hub id); repeat for several; its id "
                        "in the API is the name given here (default: Whisper tiny.en, installed with the package)")
    p.add_argument("--diarizer", default=None, metavar="M",
                   help="a speaker diarizer (a Sortformer model: file, short name or hub id) loaded beside the models: "
                        "requests with diarize=true or response_format=diarized_json and live streams with "
                        "diarize=true get who spoke what (default: none; such requests get 400)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8000, help="default: 8000 (0: any free port, printed at start)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="require 'Authorization: Bearer KEY' on every endpoint but /health "
                        "(default: $TRANSCRIBE_API_KEY; none: no key is asked). Printable ASCII without spaces; "
                        "an empty key is refused")
    p.add_argument("--insecure-no-key", action="store_true",
                   help="serve an address other than loopback without an API key (refused otherwise): every "
                        "host that reaches it may use the server")
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
    p.add_argument("--allowed-hosts", action="append", default=[], metavar="NAME",
                   help="a name clients may reach the server by besides localhost, 127.0.0.1, [::1] and --host "
                        "(for 0.0.0.0 or ::, also any IP address and this machine's name); repeat, or separate "
                        "with commas; '*': any. Requests whose Host header names another get 403 (DNS rebinding)")
    p.add_argument("--allowed-origins", action="append", default=[], metavar="ORIGIN",
                   help="a web page origin (scheme://host[:port]) whose browser requests and WebSockets are "
                        "accepted; repeat, or separate with commas; 'null': local files and sandboxed pages; "
                        "'*': any (default: the server's own origins only). Others get 403, key or not")
    p.add_argument("--max-connections", type=_positive_int, default=limits.MAX_CONNECTIONS, metavar="N",
                   help="connections held at once, HTTP and WebSocket together; one more is answered 503 at once "
                        f"and closed (default: {limits.MAX_CONNECTIONS}; the descriptor limit is raised to fit)")
    p.add_argument("--header-timeout-s", type=_positive_float, default=limits.HEADER_TIMEOUT_S, metavar="S",
                   help="a connection that has not sent a request's headers S seconds after it opened (or after "
                        f"its last answer) is closed (default: {limits.HEADER_TIMEOUT_S:g})")
    p.add_argument("--keep-alive-s", type=_positive_float, default=limits.KEEP_ALIVE_S, metavar="S",
                   help=f"an idle keep-alive connection is closed after S seconds (default: {limits.KEEP_ALIVE_S:g})")
    p.add_argument("--stream-idle-s", type=_positive_float, default=None, metavar="S",
                   help="a live stream (WebSocket) whose client sends no message for S seconds is closed, code "
                        "1008 with the reason (default: 300)")
    p.add_argument("--no-ui", action="store_true",
                   help="serve no web page (by default GET / is a page that transcribes a file or the microphone "
                        "through this server's API; it is served without the key and sends the key typed into it)")
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
    problem = _check_key(args)
    if problem:
        _say(f"error: {problem}")
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

    problem = limits.fit_fd_limit(args.max_connections)
    if problem:
        sock.close()
        _say(f"error: {problem}")
        return 2
    import transcribe
    from ..hub import DEFAULT_MODEL
    from ..runtime import configure_process

    logging.basicConfig(level=getattr(logging, args.log_level.upper()), format="transcribe: %(message)s")
    configure_process(args.workers_threads)  # the server is a program of its own
    from ..audio_limits import set_max_audio_seconds

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
    diarizer = None
    if args.diarizer:
        try:
            diarizer = transcribe.load_model(args.diarizer, device=args.device, dtype=args.dtype,
                                             threads=args.workers_threads)
        except TranscribeError as e:
            sock.close()
            _say(f"error: --diarizer: {' '.join(str(e).split())}")
            return 2
        if not getattr(diarizer, "diarizer", False):
            sock.close()
            _say(f"error: --diarizer {args.diarizer} is a {getattr(diarizer, 'kind', '') or 'speech recognition'} "
                 "model, not a diarizer (a Sortformer model); serve it with --model")
            return 2

    server = build_server(args, models, sock, diarizer)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    _say(f"serving {', '.join(models)} at http://{shown}:{port}/v1 (live: ws://{shown}:{port}/v1/audio/stream)"
         + (f", who spoke: {args.diarizer}" if diarizer is not None else ""))
    if not args.no_ui:
        _say(f"the web page: http://{shown}:{port}/")
    if not args.api_key:
        where = "this machine only" if _loopback(args.host) else "EVERY host that can reach this address"
        _say(f"no --api-key: requests are not authenticated; listening on {args.host} ({where})")
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    return 0


def _check_key(args: argparse.Namespace) -> Optional[str]:
    """Sets args.api_key from $TRANSCRIBE_API_KEY when not given; why the key (or its absence) is refused."""
    from .security import key_problem

    source = "--api-key"
    if args.api_key is None:
        args.api_key = os.environ.get("TRANSCRIBE_API_KEY")
        source = "$TRANSCRIBE_API_KEY"
    problem = key_problem(args.api_key, source)
    if problem:
        return problem
    if not args.api_key and not _loopback(args.host) and not args.insecure_no_key:
        return (f"--host {args.host} serves other hosts: give an --api-key (or $TRANSCRIBE_API_KEY), or "
                "--insecure-no-key to serve them without one")
    return None


def _names(values: list[str]) -> list[str]:
    """The values of a repeatable option that also takes comma-separated lists."""
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def build_server(args: argparse.Namespace, models: dict, sock: socket.socket, diarizer=None):
    """The uvicorn server of `models` (and `diarizer`, the --diarizer model, or None) as the parsed
    command line `args` configure it, for `sock`."""
    import uvicorn

    from .app import create_app
    from .engine import Engine
    from .security import Access
    from .websocket import MAX_FRAME_BYTES

    engine = Engine(models, max_batch=args.max_batch, wait_ms=args.batch_wait_ms, diarizer=diarizer,
                    diarizer_id=getattr(args, "diarizer", None))
    access = Access(args.host, _names(args.allowed_hosts), _names(args.allowed_origins))
    app = create_app(engine, api_key=args.api_key, max_upload_mb=args.max_upload_mb, access=access,
                     stream_idle_s=args.stream_idle_s, ui=not getattr(args, "no_ui", False))
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    config = uvicorn.Config(app, log_level=args.log_level, access_log=args.log_level in ("debug", "info"),
                            ws_max_size=MAX_FRAME_BYTES + 4096, ws_max_queue=16,
                            timeout_graceful_shutdown=5, lifespan="on",
                            http=limits.limited_protocol(AutoHTTPProtocol, args.max_connections, args.header_timeout_s),
                            limit_concurrency=args.max_connections + 1, timeout_keep_alive=args.keep_alive_s,
                            backlog=limits.ACCEPT_BATCH)
    server = limits.server_class()(config)
    limits.FLOODS.install()  # after uvicorn.Config, which sets up uvicorn's loggers
    return server


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
