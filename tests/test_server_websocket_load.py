"""WebSocket sessions fed faster than real time: a recorded file sent as fast as the network goes.

The server reads each socket all the time, in a task of its own, while the model decodes behind:
so pings and pongs are answered at once, whatever audio is queued. Before that it read one frame,
ran the model on it, then read the next: a ping or pong the client sent waited in the TCP buffers
behind all the audio sent before it, and a keepalive (uvicorn's, or the client's: 20 s ping + 20 s
timeout by default) closed the socket with `1011 keepalive ping timeout` once the model was more
than about 40 s behind the sender (tiny.en: after 40 s of a 5-minute file).

The model here is the tiny Parakeet trained on jfk.wav (buffered streaming, ~100x real time on
two cores), on jfk.wav repeated to 5 minutes: it decodes the whole input in a few seconds, so
with the default keepalive nothing would time out before or after the fix. The tests that must
fail without the fix have the client ping every second and give up after one second without a
pong: the same failure, reached in a second instead of 40. The expected text is the same model's
session fed the same audio, in a process set up as the server is.
"""
from __future__ import annotations

import ast
import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import AUDIO, REPO, TINY
from .test_server import Server

websockets = pytest.importorskip("websockets", reason="the server tests need the test extra")
pytest.importorskip("fastapi", reason="the server tests need the test extra")
pytest.importorskip("uvicorn", reason="the server tests need the test extra")

FIT = TINY / "tiny-tdt-fit.nemo"
JFK = AUDIO / "jfk.wav"
JFK_TEXT = "and so my fellow americans ask not what your country can do for you ask what you can do for your country"
README_URL = '"ws://127.0.0.1:8000/v1/audio/stream"'
README_INPUT = '"../shared/audio/jfk.wav"'
# Ping each second, give up after a second without a pong (see the module's docstring).
FAST_KEEPALIVE = "ping_interval=1, ping_timeout=1"

pytestmark = pytest.mark.skipif(not FIT.is_file() or not JFK.is_file(), reason="needs ../shared (audio and models)")


def _server(tmp: Path, patch: str = "") -> Server:
    """`transcribe serve --model FIT` in a subprocess (test_server.Server); `patch` sets module constants first."""
    code = (f"import transcribe.server.websocket as w; {patch}\n"
            "from transcribe.server.cli import main; raise SystemExit(main(__import__('sys').argv[1:]))")
    return Server(["--model", str(FIT)], tmp, code=code)


def _ws_url(server: Server) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/audio/stream"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = _server(tmp_path_factory.mktemp("ws-load"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def five_minutes(tmp_path_factory) -> Path:
    """jfk.wav (11 s) repeated to a little over 5 minutes, as a 16 kHz s16 WAV file."""
    import soundfile as sf

    from transcribe.audio import load_audio

    one = np.clip(np.round(load_audio(str(JFK), sample_rate=16000) * 32768), -32768, 32767).astype(np.int16)
    pcm = np.tile(one, -(-300 * 16000 // len(one)))
    path = tmp_path_factory.mktemp("five-minutes") / "five-minutes.wav"
    sf.write(str(path), pcm, 16000, subtype="PCM_16", format="WAV")
    return path


_SESSION_TEXT = """
import sys
from transcribe.runtime import configure_process
configure_process()  # as the server sets itself up: OpenMP's idle threads sleep (this process imported torch)
import soundfile as sf, transcribe
pcm, _ = sf.read(sys.argv[2], dtype="int16")
session = transcribe.load_model(sys.argv[1]).stream()
text = ""
for i in range(0, len(pcm), 1600):
    session.feed(pcm[i:i + 1600], 16000)
    text += session.take_new_text()
session.finalize()
text += session.take_new_text()
print(" ".join(u.strip() for u in text.split("\\n") if u.strip()))
"""


@pytest.fixture(scope="module")
def expected(five_minutes) -> str:
    """The text of the model's own session fed the input in 100 ms pieces (in a process of its own,
    set up as the server's is)."""
    out = subprocess.run([sys.executable, "-c", _SESSION_TEXT, str(FIT), str(five_minutes)], capture_output=True,
                         text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def _duration(path: Path) -> float:
    import soundfile as sf

    return sf.info(str(path)).frames / 16000


def _check(messages: list[dict], expected: str, seconds: float) -> None:
    kinds = [m["type"] for m in messages]
    assert kinds[0] == "session" and kinds[-1] == "final" and kinds.count("final") == 1, kinds[-3:]
    assert "error" not in kinds
    final = messages[-1]
    assert final["text"].startswith(JFK_TEXT)  # sensible: the model's one sentence, first of all
    assert final["text"] == expected  # every frame reached the model, in order
    assert final["duration"] == pytest.approx(seconds, abs=1e-3)
    words = [m for m in messages if m["type"] == "word"]
    assert " ".join(w["word"] for w in words) == final["text"]
    assert all(a["start"] <= b["start"] for a, b in zip(words, words[1:]))
    assert words[-1]["end"] > seconds - 15  # the words run to the end of the 5 minutes


def _readme_code(url: str, path: Path, keepalive: str = "") -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "websockets.connect(" in b]
    assert len(blocks) == 1
    code = blocks[0]
    assert code.count(README_URL) == 1 and code.count(README_INPUT) == 1
    return code.replace(README_URL, f'"{url}"' + (f", {keepalive}" if keepalive else "")).replace(
        README_INPUT, repr(str(path)))


@pytest.mark.parametrize("keepalive", ["", f"{FAST_KEEPALIVE}, max_queue=None"], ids=["as-written", "fast-keepalive"])
def test_readme_example_sends_five_minutes_at_once(server, five_minutes, expected, keepalive):
    """The README's example as written (the server's URL and the input substituted): it sends the
    whole file, then reads. With the fast keepalive (which fails without the fix) the client's own
    read-ahead limit is lifted too: the example reads nothing until it has sent everything, and
    once 16 messages wait unread the `websockets` client stops reading its socket, pongs included;
    with its default 20 s pings the second or so it takes to send 5 minutes is nothing, with 1 s
    pings that would time out the client for its own reason, not the server's."""
    code = _readme_code(_ws_url(server), five_minutes, keepalive)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    messages = [ast.literal_eval(line) for line in out.stdout.splitlines()]
    _check(messages, expected, _duration(five_minutes))


async def _send_and_read(url: str, pcm: np.ndarray, **connect) -> list[dict]:
    """Sends 100 ms frames as fast as the socket takes them while another task reads."""
    messages: list[dict] = []
    async with websockets.connect(url, **connect) as ws:
        async def reader():
            async for message in ws:
                messages.append(json.loads(message))

        task = asyncio.ensure_future(reader())
        for i in range(0, len(pcm), 1600):
            await ws.send(pcm[i:i + 1600].tobytes())
        await ws.send(json.dumps({"type": "end"}))
        await asyncio.wait_for(task, 600)
    return messages


def test_client_reading_while_it_sends_five_minutes(server, five_minutes, expected):
    """A client that reads as it sends, pinging each second (fails without the fix: its pings
    waited behind the queued audio)."""
    import soundfile as sf

    pcm, _ = sf.read(str(five_minutes), dtype="int16")
    messages = asyncio.run(_send_and_read(_ws_url(server), pcm, ping_interval=1, ping_timeout=1))
    _check(messages, expected, _duration(five_minutes))


def test_backlog_over_its_bound_pauses_reads_and_spools(tmp_path, five_minutes, expected):
    """A server whose backlog holds 20 s (64 KiB of it in memory, the rest in a temporary file):
    the 5 minutes pass through the file, and the reads pause (TCP slows the client) whenever
    20 s wait; the text is the same."""
    import soundfile as sf

    s = _server(tmp_path, patch="w.BACKLOG_S = 20.0; w.MEMORY_BYTES = 64 * 1024")
    try:
        pcm, _ = sf.read(str(five_minutes), dtype="int16")
        messages = asyncio.run(_send_and_read(_ws_url(s), pcm))
        _check(messages, expected, _duration(five_minutes))
    finally:
        s.stop()


# ---------------------------------------------------------------------------------------------- the backlog


def test_backlog_keeps_order_through_memory_and_file():
    from transcribe.server.websocket import _Backlog

    async def run():
        backlog = _Backlog(limit=1000, memory_bytes=10)
        pieces = [bytes([k]) * n for k, n in enumerate([4, 4, 4, 7, 1, 9, 3], start=1)]
        for p in pieces[:5]:
            await backlog.put(p)  # 8 bytes in memory; 4 + 7 + 1 over it go to the file
        assert backlog._in_memory == 8 and backlog._written == 12
        got = [await backlog.get(6)]  # a whole piece of memory, not two (6 < 8)
        await backlog.put(pieces[5])  # the file is not empty: new pieces go after it
        got.append(await backlog.get(100))  # the rest of memory, then the file up to its end
        assert backlog._written == 0  # the file, emptied, starts anew
        await backlog.put(pieces[6])  # memory again
        backlog.finish("end")
        while (data := await backlog.get(5)) is not None:
            got.append(data)
        assert b"".join(got) == b"".join(pieces)
        assert got[0] == pieces[0] and len(got[1]) == 4 + 12 + 9
        assert await backlog.get(5) is None
        backlog.close()

    asyncio.run(run())


def test_backlog_pauses_its_writer_at_the_limit_and_raises_what_ended_it():
    from transcribe.server.websocket import _Backlog

    async def run():
        backlog = _Backlog(limit=10, memory_bytes=100)
        await backlog.put(b"x" * 6)
        writer = asyncio.ensure_future(backlog.put(b"y" * 6))  # held: 12 >= 10
        await asyncio.sleep(0.05)
        assert not writer.done() and backlog.size == 12
        assert await backlog.get(6) == b"x" * 6
        await asyncio.wait_for(writer, 5)  # under the limit again: the writer goes on
        gone = ConnectionResetError("client gone")
        backlog.finish(gone)
        with pytest.raises(ConnectionResetError):
            await backlog.get(6)  # at once, although audio is held
        backlog.close()

    asyncio.run(run())
