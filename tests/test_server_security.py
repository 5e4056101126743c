"""The server against hostile clients (issue 36): Host and Origin checks, the API key's start-up checks,
what /health shows, a connection flood, clients that leave mid-upload, HEAD /health, idle WebSockets.

Most tests run the application in this process (uvicorn in a thread, configured as `transcribe serve`
configures it) on a stand-in model: none of them transcribes anything. The start-up checks run
`transcribe serve` itself.
"""
from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import threading
import time
import types

import pytest

from .conftest import REPO

websockets = pytest.importorskip("websockets", reason="the server tests need the test extra")
pytest.importorskip("fastapi", reason="the server tests need the test extra")
pytest.importorskip("uvicorn", reason="the server tests need the test extra")
from websockets.exceptions import InvalidStatus  # noqa: E402


def _model():
    """A stand-in model: /health, the guard and the WebSocket's first steps never call it."""
    return types.SimpleNamespace(family="stand-in", sample_rate=16000)


class InProcess:
    """The application of `transcribe serve` (cli.build) on a free loopback port, in a thread."""

    def __init__(self, argv: list[str], models: dict | None = None):
        from transcribe.server import cli

        self.sock = cli._listen("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        args = cli._parser().parse_args(["--host", "127.0.0.1", "--log-level", "warning", *argv])
        self.server = cli.build_server(args, models or {"stand-in": _model()}, self.sock)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started

    def raw(self, request: bytes, timeout: float = 30) -> bytes:
        """Sends `request` as it is and returns all the server answers (until it closes or `timeout`)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(request)
            out = b""
            try:
                while chunk := s.recv(65536):
                    out += chunk
                    if b"\r\n\r\n" in out and _complete(out):
                        break
            except socket.timeout:
                pass
            return out

    def get(self, path: str, headers: dict | None = None, method: str = "GET", body: bytes = b"") -> tuple[int, bytes]:
        head = {"Host": f"127.0.0.1:{self.port}", "Connection": "close", **(headers or {})}
        if body or method == "POST":
            head["Content-Length"] = str(len(body))
        lines = "".join(f"{k}: {v}\r\n" for k, v in head.items() if v is not None)
        answer = self.raw(f"{method} {path} HTTP/1.1\r\n{lines}\r\n".encode("latin-1") + body)
        status = int(answer.split(b" ", 2)[1])
        return status, answer.split(b"\r\n\r\n", 1)[1]

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return head.startswith(b"HTTP/1.1 101") or b"HEAD" in head


@pytest.fixture
def serve():
    started = []

    def start(*argv: str, models: dict | None = None) -> InProcess:
        s = InProcess(list(argv), models)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


def _ws_status(port: int, headers: dict, path: str = "/v1/audio/stream") -> int:
    """The HTTP status a WebSocket handshake with these headers gets (101: accepted)."""
    head = {"Host": f"127.0.0.1:{port}", "Upgrade": "websocket", "Connection": "Upgrade",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13", **headers}
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items() if v is not None)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\n{lines}\r\n".encode())
        answer = s.recv(4096)
    return int(answer.split(b" ", 2)[1])


# ---------------------------------------------------------------------------------------------- 8: Host, Origin


def test_host_header_must_name_the_server(serve):
    s = serve()
    for host in (f"127.0.0.1:{s.port}", f"localhost:{s.port}", f"[::1]:{s.port}", "LOCALHOST."):
        assert s.get("/health", {"Host": host})[0] == 200, host
    for host in (f"evil.example:{s.port}", "evil.example", "localhost.evil.example", "127.0.0.1@evil", "[::1"):
        status, body = s.get("/health", {"Host": host})
        assert status == 403, host
        assert "Host" in json.loads(body)["error"]["message"]
        assert _ws_status(s.port, {"Host": host}) == 403, host
    assert _ws_status(s.port, {}) == 101
    named = serve("--allowed-hosts", "asr.lan", "--allowed-hosts", "box.local")
    assert named.get("/health", {"Host": f"asr.lan:{named.port}"})[0] == 200
    assert named.get("/health", {"Host": "box.local"})[0] == 200
    assert named.get("/health", {"Host": "evil.example"})[0] == 403


def test_origin_must_be_allowed_with_or_without_a_key(serve):
    for key in ([], ["--api-key", "k3y"]):
        s = serve(*key)
        auth = {"Authorization": "Bearer k3y"} if key else {}
        for origin in ("https://evil.example", "null", f"http://evil.example:{s.port}",
                       "http://localhost:3000", "file://", "http://127.0.0.1"):
            assert _ws_status(s.port, {"Origin": origin, **auth}) == 403, origin
            status, body = s.get("/v1/models", {"Origin": origin, **auth})
            assert status == 403 and "Origin" in json.loads(body)["error"]["message"], origin
            assert s.get("/v1/audio/transcriptions", {"Origin": origin, **auth}, method="POST")[0] == 403
        for origin in (f"http://127.0.0.1:{s.port}", f"http://localhost:{s.port}", None):
            assert _ws_status(s.port, {"Origin": origin, **auth}) == 101, origin
            assert s.get("/v1/models", {"Origin": origin, **auth})[0] == 200, origin
    s = serve("--allowed-origins", "https://app.example", "--allowed-origins", "null")
    for origin in ("https://app.example", "https://APP.example/", "null"):
        assert _ws_status(s.port, {"Origin": origin}) == 101, origin
    assert _ws_status(s.port, {"Origin": "https://app.example.evil"}) == 403
    s = serve("--allowed-origins", "*")
    assert _ws_status(s.port, {"Origin": "https://anything.example"}) == 101


# ---------------------------------------------------------------------------------------------- 9: the key


@pytest.mark.parametrize("argv, env, says", [
    (["--api-key", ""], None, "--api-key is empty"),
    (["--api-key", "", "--host", "0.0.0.0"], None, "--api-key is empty"),
    ([], "", "$TRANSCRIBE_API_KEY is empty"),
    (["--host", "0.0.0.0"], "", "$TRANSCRIBE_API_KEY is empty"),
    (["--api-key", " k3y"], None, "white space"),
    (["--api-key", "k3y\n"], None, "white space"),
    ([], "k3y ", "$TRANSCRIBE_API_KEY has white space"),
    (["--api-key", "clé"], None, "printable ASCII"),
    (["--api-key", "k 3y"], None, "printable ASCII"),
    (["--host", "0.0.0.0"], None, "--insecure-no-key"),
    (["--host", "::"], None, "--insecure-no-key"),
])
def test_bad_keys_and_unguarded_binds_are_refused_at_start(argv, env, says, monkeypatch, capsys):
    from transcribe.server.cli import main

    if env is None:
        monkeypatch.delenv("TRANSCRIBE_API_KEY", raising=False)
    else:
        monkeypatch.setenv("TRANSCRIBE_API_KEY", env)
    # --port 1: refused before anything listens or loads (a privileged port, were it reached)
    assert main([*argv, "--port", "1", "--model", "no-such-model-either"]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err


def test_keys_and_binds_that_are_fine(monkeypatch):
    import argparse

    from transcribe.server.cli import _check_key

    def check(env=None, **kw):
        if env is None:
            monkeypatch.delenv("TRANSCRIBE_API_KEY", raising=False)
        else:
            monkeypatch.setenv("TRANSCRIBE_API_KEY", env)
        args = argparse.Namespace(**{"api_key": None, "host": "127.0.0.1", "insecure_no_key": False, **kw})
        return _check_key(args), args.api_key

    assert check() == (None, None)
    assert check(host="localhost") == (None, None)
    assert check(env="s3cret-K_ey.~") == (None, "s3cret-K_ey.~")
    assert check(host="0.0.0.0", api_key="k3y") == (None, "k3y")
    assert check(host="0.0.0.0", insecure_no_key=True) == (None, None)


# ---------------------------------------------------------------------------------------------- 10: /health


def test_health_shows_model_names_not_paths(serve, tmp_path):
    from transcribe.server.app import public_name

    local = tmp_path / "secret-dir" / "tiny.nemo"
    local.parent.mkdir()
    local.write_bytes(b"")
    s = serve(models={str(local): _model(), "nvidia/parakeet-tdt-0.6b-v3": _model(), "tiny.en": _model()})
    status, body = s.get("/health")
    assert status == 200
    assert json.loads(body)["models"] == ["tiny.nemo", "nvidia/parakeet-tdt-0.6b-v3", "tiny.en"]
    assert b"secret-dir" not in body and str(tmp_path).encode() not in body
    assert public_name("/gone/models/x.gguf") == "x.gguf"  # absolute, even once the file is gone
    assert public_name("../models/m/") == "m" and public_name("C:\\models\\m.nemo") == "m.nemo"


# ---------------------------------------------------------------------------------------------- 3: connection floods


def _flood(port: int, n: int) -> list[socket.socket]:
    """n connections that send nothing."""
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        out.append(s)
    return out


def _health_soon(get, within_s: float = 60) -> int:
    """/health's status once it answers (retried while the flood's connections hold every slot)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            status = get()
            if status == 200 or time.monotonic() > deadline:
                return status
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def test_idle_connections_over_the_limit_get_503_and_health_answers(serve, caplog):
    from transcribe.server.limits import FLOODS

    FLOODS._last.clear()
    FLOODS._held.clear()
    # The header timeout is long enough for 150 connections to open (milliseconds) before it closes any.
    s = serve("--max-connections", "20", "--header-timeout-s", "4")
    caplog.set_level(logging.WARNING)
    idle = _flood(s.port, 150)
    try:
        answers = [c.recv(4096) for c in idle[20:]]  # answered at once: no request needed
        assert all(a.startswith(b"HTTP/1.1 503 ") and b"too_many_connections" in a for a in answers)
        # The 20 held are closed once the header timeout passes (recv: end of stream), then /health answers.
        assert [c.recv(4096) for c in idle[:20]] == [b""] * 20
        assert _health_soon(lambda: s.get("/health")[0]) == 200
    finally:
        for c in idle:
            c.close()
    lines = [r for r in caplog.records if "connection" in r.getMessage()]
    assert 1 <= len(lines) <= 3, [r.getMessage() for r in lines]  # once, not per socket
    slow = socket.create_connection(("127.0.0.1", s.port), timeout=30)  # headers never finished: closed
    slow.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    assert slow.recv(4096) == b""
    slow.close()


FLOOD_SERVER = """
import resource, sys, types
resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))  # as a small default limit is, reached by 200 sockets
import transcribe
transcribe.load_model = lambda *a, **k: types.SimpleNamespace(family="stand-in", sample_rate=16000)
from transcribe.server.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_a_flood_past_the_descriptor_limit_is_logged_once(tmp_path):
    """A server process that may open 200 descriptors, flooded with 300 idle connections: it answers
    those over --max-connections (40) 503, /health still answers, and the log says so in a line or two,
    with no traceback (before: EMFILE on every accept, each with its traceback, /health unanswered)."""
    from .test_server import Server

    s = Server(["--max-connections", "40", "--header-timeout-s", "2"], tmp_path, code=FLOOD_SERVER)
    try:
        idle = _flood(s.port, 300)
        try:
            assert _health_soon(lambda: s.request("GET", "/health", timeout=10)[0]) == 200
        finally:
            for c in idle:
                c.close()
        assert _health_soon(lambda: s.request("GET", "/health", timeout=10)[0]) == 200
        log = s.output()
    finally:
        s.stop()
    assert "Traceback" not in log and "Too many open files" not in log, log[-3000:]
    assert 1 <= len([line for line in log.splitlines() if "connection" in line]) <= 3, log[-3000:]


def test_max_connections_beyond_the_descriptor_limit_is_refused(tmp_path):
    code = FLOOD_SERVER
    r = subprocess.run([sys.executable, "-c", code, "--port", "0", "--max-connections", "500"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--max-connections" in r.stderr and "ulimit" in r.stderr, r.stderr


def test_flood_filter_lets_one_line_a_minute_through():
    import errno

    from transcribe.server.limits import OnceAMinute

    now = [0.0]
    flt = OnceAMinute(clock=lambda: now[0])
    logger = logging.getLogger("test.floods")
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append
    logger.addHandler(handler)
    logger.addFilter(flt)
    logger.propagate = False
    try:
        for i in range(1000):
            try:
                raise OSError(errno.EMFILE, "Too many open files")
            except OSError:
                logger.error("socket.accept() out of system resource", exc_info=True)
            logger.warning("refused %d", i, extra={"once_a_minute": "refused"})
            logger.warning("something else %d", i)
        now[0] = 61.0
        logger.warning("refused again", extra={"once_a_minute": "refused"})
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(flt)
    messages = [r.getMessage() for r in seen]
    resources = [r for r in seen if "out of system resources" in r.getMessage()]
    assert len(resources) == 1 and resources[0].exc_info is None and "ulimit" in resources[0].getMessage()
    assert [m for m in messages if m.startswith("refused")] == [
        "refused 0", "refused again (999 more like it in the last minute not logged)"]
    assert len([m for m in messages if m.startswith("something else")]) == 1000


# ---------------------------------------------------------------------------------------------- 14: clients that leave


def test_a_client_leaving_mid_upload_is_one_line_not_an_internal_error(serve, caplog):
    s = serve("--log-level", "info")
    caplog.set_level(logging.INFO)
    boundary = "b0undary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode() + b"\0" * 50_000
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as c:
            c.sendall(f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\n"
                      f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: 1000000\r\n\r\n"
                      .encode() + head)
            time.sleep(0.3)  # the server is reading the body when the client goes
    assert _health_soon(lambda: s.get("/health")[0]) == 200
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len([r for r in caplog.records if "disconnect" in r.getMessage()]) < 3:
        time.sleep(0.1)
    gone = [r for r in caplog.records if "disconnect" in r.getMessage()]
    assert len(gone) == 3 and all(r.exc_info is None and r.levelno == logging.INFO for r in gone), gone
    assert not [r for r in caplog.records if r.exc_info or "internal error" in r.getMessage()]


# ---------------------------------------------------------------------------------------------- 15: HEAD, idle streams


def test_head_health_is_200_without_a_body(serve):
    s = serve()
    answer = s.raw(f"HEAD /health HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\nConnection: close\r\n\r\n".encode())
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and body == b"", answer


async def _idle_session(port: int, start: dict | None, frames: int = 0) -> tuple[list[dict], int, str]:
    """Opens a stream, sends `start` (if any) and `frames` frames of silence a quarter of a second apart,
    then nothing: the messages, close code and reason the server ends it with."""
    async with websockets.connect(f"ws://127.0.0.1:{port}/v1/audio/stream", ping_interval=None) as ws:
        if start is not None:
            await ws.send(json.dumps(start))
        for _ in range(frames):
            await ws.send(b"\0\0" * 1600)
            await asyncio.sleep(0.25)
        messages = []

        async def read():
            try:
                async for m in ws:
                    messages.append(json.loads(m))
            except websockets.exceptions.ConnectionClosed:
                pass

        try:
            await asyncio.wait_for(read(), 60)  # without the idle timeout: never closed
        except asyncio.TimeoutError:
            return messages, None, "still open after 60 s"
        return messages, ws.close_code, ws.close_reason


def test_an_idle_websocket_session_is_closed(serve):
    from .conftest import TINY

    import transcribe

    s = serve("--stream-idle-s", "1")
    messages, code, reason = asyncio.run(_idle_session(s.port, None))  # not even a start message
    assert code == 1008 and "no message for 1 s" in reason and messages[-1]["type"] == "error", (messages, reason)
    model = transcribe.load_model(str(TINY / "tiny-tdt-fit.nemo"))
    s = serve("--stream-idle-s", "1", models={"fit": model})
    # A session that sends a frame each quarter of a second for two seconds is not idle; then it is.
    messages, code, reason = asyncio.run(_idle_session(s.port, {"type": "start"}, frames=8))
    assert messages[0]["type"] == "session" and messages[-1]["type"] == "error", messages
    assert code == 1008 and "no message for 1 s" in reason


def test_stream_idle_default():
    from transcribe.server import cli, websocket

    assert websocket.IDLE_S == 300.0 and cli._parser().parse_args([]).stream_idle_s is None
    assert "default: 300" in cli._parser().format_help().replace("\n", " ").replace("  ", " ")
