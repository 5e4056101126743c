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
