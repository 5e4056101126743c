"""What the tests of the live families' WebSocket sessions share (tests/test_<family>.py): the server on a free
local port in a thread, one client that sends a stream's start message, 16-bit PCM in blocks and the end, and
collects the events up to the final one; and a session fed a clip in pieces."""
from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest


def websocket_events(model, pcm16: np.ndarray, block: int, start: dict | None = None) -> list[dict]:
    """The events the server's /v1/audio/stream sends for `pcm16` (int16 samples, sent `block` at a time) to a
    session of `model` (served as "m"; `start`: more fields of the start message). Skips visibly without the
    test extra."""
    pytest.importorskip("fastapi", reason="the server tests need the test extra")
    uvicorn = pytest.importorskip("uvicorn", reason="the server tests need the test extra")
    websockets = pytest.importorskip("websockets", reason="the server tests need the test extra")
    import asyncio

    from transcribe.server import Engine, create_app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(Engine({"m": model})), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    async def talk():
        events = []
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/audio/stream") as ws:
            await ws.send(json.dumps({"type": "start", "model": "m", **(start or {})}))
            for i in range(0, len(pcm16), block):
                await ws.send(pcm16[i:i + block].tobytes())
            await ws.send(json.dumps({"type": "end"}))
            async for message in ws:
                events.append(json.loads(message))
                if events[-1]["type"] == "final":
                    break
        return events

    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        return asyncio.run(talk())
    finally:
        server.should_exit = True
        thread.join(30)


def fed_session(model, pcm, cuts, **options):
    """A live session of `model` (stream(**options)) fed `pcm` cut at `cuts` (sample indices) and finalized, for the
    families whose every token is final at once (no tentative text after any feed); (session, the text it
    committed)."""
    s = model.stream(**options)
    text = []
    bounds = [0, *cuts, len(pcm)]
    for a, b in zip(bounds, bounds[1:]):
        s.feed(pcm[a:b])
        text.append(s.take_new_text())
        assert s.tentative_text() == ""  # every token is final
    s.finalize()
    text.append(s.take_new_text())
    return s, "".join(text)
