"""Live streaming over a WebSocket: `/v1/audio/stream`.

The client may first send a JSON text message configuring the session (every key optional):

    {"type": "start", "model": "<id>", "sample_rate": 16000, "encoding": "pcm_s16le" | "pcm_f32le",
     ...the model's stream options: "att_context_size": [70, 13], "eou_reset", "head",
     "language", "task", "initial_prompt", "chunk_s", "left_s", "right_s"}

(the same keys work as query parameters: `/v1/audio/stream?sample_rate=8000`), then binary
frames of mono PCM (16 kHz s16le unless configured otherwise), of any length, and ends with
`{"type": "end"}` or by closing. The server answers with JSON text messages:

    {"type": "session", "model", "sample_rate", "encoding", "chunk_ms", "lookahead_ms"}  at the start
    {"type": "partial", "text"}               the current utterance's committed + tentative text, when it changes
    {"type": "word", "word", "start", "end", "confidence"}   each finished word
    {"type": "eou" | "eob", "token", "frame", "time"}        end of an utterance / of a backchannel
    {"type": "final", "text", "duration"}     the whole stream's text, after "end" (then the server closes)
    {"type": "error", "message"}              a bad message or option (then the server closes)

Each socket has its own session (`model.stream()`); its steps run on the engine's inference lane,
one frame at a time, so a client that sends faster than the model keeps up is slowed by TCP, not
buffered; a frame holds at most 256 KiB (8 s of 16 kHz s16le) and at most 16 wait unread. What a
session keeps is bounded: words and events are sent and released, the text of
the current utterance is kept, and the finished utterances' text (tens of kB an hour) for "final".
"""
from __future__ import annotations

import json
import logging
from typing import Optional

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ..errors import TranscribeError
from ..results import Word
from .engine import Engine, NoSuchModel

log = logging.getLogger("transcribe.server")

ENCODINGS = {"pcm_s16le": 2, "pcm_f32le": 4}
STREAM_OPTIONS = ("att_context_size", "eou_reset", "head", "language", "task", "initial_prompt", "chunk_s",
                  "left_s", "right_s")
MAX_FRAME_BYTES = 256 * 1024  # 8 s of 16 kHz s16le: a larger frame is a client error


class _BadMessage(Exception):
    pass


def add_stream_route(app, engine: Engine) -> None:
    @app.websocket("/v1/audio/stream")
    async def stream(ws: WebSocket):
        await ws.accept(subprotocol=_echo_subprotocol(ws))
        try:
            await _serve(ws, engine)
        except WebSocketDisconnect:
            return  # the client went away: its session is dropped
        except _BadMessage as e:
            await _close_with_error(ws, str(e), 1003)
        except TranscribeError as e:
            await _close_with_error(ws, str(e), 1003)
        except Exception as e:  # noqa: BLE001 - one socket fails, the server goes on
            log.exception("internal error in a live stream")
            await _close_with_error(ws, f"internal error: {type(e).__name__}", 1011)


def _echo_subprotocol(ws: WebSocket) -> Optional[str]:
    offered = ws.scope.get("subprotocols") or []
    return offered[0] if offered else None


async def _close_with_error(ws: WebSocket, message: str, code: int) -> None:
    if ws.application_state == WebSocketState.CONNECTED and ws.client_state == WebSocketState.CONNECTED:
        try:
            await ws.send_text(json.dumps({"type": "error", "message": message}))
            await ws.close(code=code)
        except Exception:  # noqa: BLE001 - the client is gone already
            pass


def _query_config(ws: WebSocket) -> dict:
    out: dict = {}
    for key, value in ws.query_params.items():
        if key == "att_context_size":
            out[key] = [int(x) for x in value.split(",")]
        elif key == "eou_reset":
            out[key] = value.lower() in ("1", "true", "yes")
        elif key in ("chunk_s", "left_s", "right_s"):
            out[key] = float(value)
        else:
            out[key] = value
    return out


async def _serve(ws: WebSocket, engine: Engine) -> None:
    try:
        config = _query_config(ws)
    except ValueError as e:
        raise _BadMessage(f"bad query parameter: {e}") from None
    first = await ws.receive()
    if first["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(first.get("code", 1000))
    pending_audio: Optional[bytes] = None
    if first.get("text") is not None:
        message = _json(first["text"])
        kind = message.get("type", "start")
        if kind == "end":
            config["_end_now"] = True
        elif kind not in ("start", "config", "session.update"):
            raise _BadMessage(f"the first text message must be {{\"type\": \"start\", ...}}; got type {kind!r}")
        else:
            config.update({k: v for k, v in message.items() if k != "type"})
    else:
        pending_audio = first.get("bytes") or b""

    served = _pick(engine, config.pop("model", None))
    try:
        rate = int(config.pop("sample_rate", 16000))
    except (TypeError, ValueError):
        raise _BadMessage("sample_rate must be an integer") from None
    if not 1000 <= rate <= 384000:
        raise _BadMessage(f"sample_rate must lie between 1000 and 384000; got {rate}")
    encoding = str(config.pop("encoding", "pcm_s16le"))
    if encoding not in ENCODINGS:
        raise _BadMessage(f"encoding must be one of {', '.join(ENCODINGS)}; got {encoding!r}")
    end_now = config.pop("_end_now", False)
    unknown = sorted(set(config) - set(STREAM_OPTIONS))
    if unknown:
        raise _BadMessage(f"unknown session option{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)} "
                          f"(known: model, sample_rate, encoding, {', '.join(STREAM_OPTIONS)})")
    if not callable(getattr(served.model, "stream", None)):
        raise _BadMessage(f"{served.id} has no streaming session")
    session = await engine.run(lambda: served.model.stream(**config))
    latency = session.latency
    await ws.send_text(json.dumps({"type": "session", "model": served.id, "sample_rate": rate,
                                   "encoding": encoding, "chunk_ms": latency.chunk_ms,
                                   "lookahead_ms": latency.lookahead_ms}))
    out = _Events(ws)
    width = ENCODINGS[encoding]
    carry = b""

    async def feed(data: bytes) -> None:
        nonlocal carry
        if len(data) > MAX_FRAME_BYTES:
            raise _BadMessage(f"a frame holds at most {MAX_FRAME_BYTES} bytes; got {len(data)}")
        data = carry + data
        cut = len(data) - len(data) % width
        carry = data[cut:]
        if cut:
            pcm = _samples(data[:cut], encoding)
            await engine.run(lambda: session.feed(pcm, rate))
            await out.update(session)

    if pending_audio:
        await feed(pending_audio)
    while not end_now:
        message = await ws.receive()
        if message["type"] == "websocket.disconnect":
            return  # closed without "end": nobody is left to read a final message
        if message.get("bytes") is not None:
            await feed(message["bytes"])
            continue
        body = _json(message.get("text") or "")
        kind = body.get("type")
        if kind == "end":
            break
        if kind in ("start", "config", "session.update"):
            raise _BadMessage("the session is configured by the first message only")
        raise _BadMessage(f"unknown message type {kind!r} (send binary PCM frames, or {{\"type\": \"end\"}})")
    await engine.run(session.finalize)
    await out.update(session)
    await out.final(session)
    await ws.close(code=1000)


def _pick(engine: Engine, name):
    try:
        return engine.pick(name)
    except NoSuchModel as e:
        if not name:
            raise _BadMessage(f"name the model in the start message: one of {', '.join(e.known)}") from None
        raise _BadMessage(f"the model '{name}' does not exist (this server has {', '.join(e.known)})") from None


def _json(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        raise _BadMessage("text messages must be JSON objects") from None
    if not isinstance(value, dict):
        raise _BadMessage("text messages must be JSON objects")
    return value


def _samples(data: bytes, encoding: str):
    import numpy as np

    if encoding == "pcm_s16le":
        return np.frombuffer(data, dtype="<i2")
    samples = np.frombuffer(data, dtype="<f4").astype(np.float32)
    if not np.isfinite(samples).all():
        raise _BadMessage("pcm_f32le samples must be finite")
    return samples


class _Events:
    """Sends a session's news: finished words and events in order, then the partial text."""

    def __init__(self, ws: WebSocket):
        self.ws = ws
        self.partial = ""
        self.text = ""

    async def update(self, session) -> None:
        self.text += session.take_new_text()
        session.take_new_tokens()  # released: the tokens reach the client as words
        for item in session.drain():
            if isinstance(item, Word):
                await self.ws.send_text(json.dumps({"type": "word", **item.to_dict()}, ensure_ascii=False))
            else:
                await self.ws.send_text(json.dumps(item.to_dict(), ensure_ascii=False))
        current = session.text()
        if current != self.partial:
            self.partial = current
            await self.ws.send_text(json.dumps({"type": "partial", "text": current}, ensure_ascii=False))

    async def final(self, session) -> None:
        lines = self.text.split("\n")
        text = " ".join(u.strip() for u in lines if u.strip())
        await self.ws.send_text(json.dumps({"type": "final", "text": text,
                                            "duration": session.latency.received_ms / 1000.0},
                                           ensure_ascii=False))
