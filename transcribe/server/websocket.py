"""Live streaming over a WebSocket: `/v1/audio/stream`.

The client may first send a JSON text message configuring the session (every key optional):

    {"type": "start", "model": "<id>", "sample_rate": 16000, "encoding": "pcm_s16le" | "pcm_f32le",
     "diarize": false, "num_speakers": null,
     ...the model's stream options (its family's StreamOptions: e.g. a cache-aware Parakeet model's
     "att_context_size": [70, 13]; any of them: `stream_options()`)}

(the same keys work as query parameters: `/v1/audio/stream?sample_rate=8000`), then binary
frames of mono PCM (16 kHz s16le unless configured otherwise), of any length, and ends with
`{"type": "end"}` or by closing (a session whose client sends no message for IDLE_S seconds,
`--stream-idle-s`, 300 by default, is closed: an "error" message, then close code 1008 with the
reason). The server answers with JSON text messages:

    {"type": "session", "model", "sample_rate", "encoding", "chunk_ms", "lookahead_ms"}  at the start
    {"type": "partial", "text"}               the current utterance's committed + tentative text, when it changes
    {"type": "word", "word", "start", "end", "confidence", "speaker"}   each finished word
    {"type": "word_speakers", "first", "speakers"}           (diarize) speakers of words sent before theirs were known
    {"type": "eou" | "eob", "token", "frame", "time"}        end of an utterance / of a backchannel
    {"type": "final", "text", "duration", "speakers"}        the whole stream's text, after "end" (then the server closes)
    {"type": "error", "message"}              a bad message or option (then the server closes)

Who spoke: with "diarize": true (a server started with `--diarizer M`; without one, an error that says
so) the session runs the server's diarizer live beside the model (`StreamingSession.add_diarizer`,
"num_speakers": at most that many speakers). Each word carries its `speaker` ("speaker_0", ... in order
of first appearance) when it is known as the word is sent, else null, and a `word_speakers` message
gives it once the diarizer has covered the word: the words numbered `first`, `first + 1`, ... (counting
the `word` messages from 0) were said by `speakers`. Labels come in word order, once each, and never
change: a UI shows the words at once and colours them as their labels come. When diarizing, "session"
names the `diarizer` and "final" has `speakers`, who spoke when (the diarizer's turns: `speaker`,
`start`, `end`).

Each socket has its own session (`model.stream()`). The socket is read all the time, by a task
of its own, whatever the model is doing: the audio goes into the session's backlog, and pings and
pongs are answered at once, so a client may send faster than the model decodes (a recorded file,
as fast as the network goes). The session's steps run on the engine's inference lane, each on the
whole backlog (up to STEP_S of audio at once): while a session is behind, its frames are fed
together and one `partial` (the latest text) is sent a step, not one a frame; words and events
are all sent, in order. The backlog holds up to BACKLOG_S of audio (an hour; at 16 kHz s16le
115 MB), MEMORY_BYTES of it in memory and the rest in an anonymous temporary file; beyond that the
socket's reads pause until the model catches up (TCP slows the client). A frame holds at most
256 KiB (8 s of 16 kHz s16le). What a session keeps besides is bounded: words and events are sent
and released, the text of the current utterance is kept, and the finished utterances' text (tens
of kB an hour) for "final".
"""
from __future__ import annotations

import asyncio
import json
import logging
import tempfile
from argparse import ArgumentTypeError
from collections import deque
from typing import Optional, Union

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from .. import surfaces
from ..errors import TranscribeError
from ..options import SAMPLE_RATES
from ..streaming import StreamMessages
from .engine import Engine, NoSuchModel, public_name

log = logging.getLogger("transcribe.server")

ENCODINGS = {"pcm_s16le": 2, "pcm_f32le": 4}
# the socket's own; the rest are the model's stream options
SOCKET_OPTIONS = ("model", "sample_rate", "encoding", "diarize", "num_speakers")
MAX_FRAME_BYTES = 256 * 1024  # 8 s of 16 kHz s16le: a larger frame is a client error
BACKLOG_S = 3600.0  # audio a session takes ahead of its model before the socket's reads pause
MEMORY_BYTES = 16 * 1024 * 1024  # of the backlog, kept in memory (the rest goes to a temporary file)
STEP_S = 8.0  # audio fed to the model in one step, at most, while a session is behind
IDLE_S = 300.0  # a session whose client sends nothing for this long is closed (--stream-idle-s)
IDLE_CODE = 1008  # the close code then (policy violation), with the reason


class _BadMessage(Exception):
    pass


class _Idle(Exception):
    pass


def add_stream_route(app, engine: Engine, idle_s: Optional[float] = None) -> None:
    """The /v1/audio/stream route; a session whose client sends no message for `idle_s` seconds
    (default IDLE_S) is closed with IDLE_CODE."""
    idle = IDLE_S if idle_s is None else float(idle_s)

    @app.websocket("/v1/audio/stream")
    async def stream(ws: WebSocket):
        await ws.accept(subprotocol=_echo_subprotocol(ws))
        try:
            await _serve(ws, engine, idle)
        except WebSocketDisconnect:
            return  # the client went away: its session is dropped
        except _Idle as e:
            log.info("closed an idle live stream: %s", e, extra={"once_a_minute": "stream-idle"})
            await _close_with_error(ws, str(e), IDLE_CODE, reason=str(e))
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


async def _close_with_error(ws: WebSocket, message: str, code: int, reason: Optional[str] = None) -> None:
    if ws.application_state == WebSocketState.CONNECTED and ws.client_state == WebSocketState.CONNECTED:
        try:
            await ws.send_text(json.dumps({"type": "error", "message": message}))
            await ws.close(code=code, reason=reason)
        except Exception:  # noqa: BLE001 - the client is gone already
            pass


def _query_config(ws: WebSocket) -> dict:
    """The query parameters: the socket's own as text, a stream option as its family parses it."""
    fields = surfaces.stream_fields()
    out: dict = {}
    for key, value in ws.query_params.items():
        parse = fields.get(key) if key not in SOCKET_OPTIONS else None
        out[key] = value if parse is None else parse(value)
    return out


def stream_options() -> tuple:
    """The session options a socket takes besides its own: every family's stream() options (the model
    refuses those its family does not take)."""
    return tuple(n for n in surfaces.stream_fields() if n not in SOCKET_OPTIONS)


async def _within(ws: WebSocket, idle_s: float) -> dict:
    """The socket's next message; raises _Idle when none comes within `idle_s` seconds."""
    try:
        return await asyncio.wait_for(ws.receive(), idle_s)
    except asyncio.TimeoutError:
        raise _Idle(f"no message for {idle_s:g} s: the session is closed (send audio, or "
                    "{\"type\": \"end\"} when done)") from None


async def _serve(ws: WebSocket, engine: Engine, idle_s: float = IDLE_S) -> None:
    try:
        config = _query_config(ws)
    except (ValueError, TypeError, ArgumentTypeError) as e:
        raise _BadMessage(f"bad query parameter: {e}") from None
    first = await _within(ws, idle_s)
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
    if not SAMPLE_RATES[0] <= rate <= SAMPLE_RATES[1]:
        raise _BadMessage(f"sample_rate must lie between {SAMPLE_RATES[0]} and {SAMPLE_RATES[1]}; got {rate}")
    encoding = str(config.pop("encoding", "pcm_s16le"))
    if encoding not in ENCODINGS:
        raise _BadMessage(f"encoding must be one of {', '.join(ENCODINGS)}; got {encoding!r}")
    end_now = config.pop("_end_now", False)
    diarize, num_speakers = _diarize_config(engine, config)
    known = stream_options()
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise _BadMessage(f"unknown session option{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)} "
                          f"(known: {', '.join(SOCKET_OPTIONS + known)})")
    if not callable(getattr(served.model, "stream", None)):
        raise _BadMessage(f"{served.id} has no streaming session")
    def start():
        session = served.model.stream(**config)
        if diarize:
            session.add_diarizer(engine.diarizer, num_speakers=num_speakers)
        return session

    session = await engine.run(start)
    latency = session.latency
    opened = {"type": "session", "model": served.id, "sample_rate": rate, "encoding": encoding,
              "chunk_ms": latency.chunk_ms, "lookahead_ms": latency.lookahead_ms}
    if diarize:
        opened["diarizer"] = _public(engine.diarizer_id)
    await ws.send_text(json.dumps(opened))
    out = _Events(ws, session)
    width = ENCODINGS[encoding]
    backlog = _Backlog(int(BACKLOG_S * rate) * width)
    receiver: Optional[asyncio.Task] = None
    try:
        if pending_audio:
            _check_frame(pending_audio)
            await backlog.put(pending_audio)
        if end_now:
            backlog.finish("end")
        else:
            receiver = asyncio.get_running_loop().create_task(_receive(ws, backlog, idle_s))
        carry = b""
        step = max(1, int(STEP_S * rate)) * width
        while True:
            data = await backlog.get(step)  # raises what ended the socket other than "end"
            if data is None:
                break
            data = carry + data
            cut = len(data) - len(data) % width
            carry = data[cut:]
            if cut:
                pcm = _samples(data[:cut], encoding)
                await engine.run(lambda: session.feed(pcm, rate))
                await out.update(session)
        await engine.run(session.finalize)
        await out.update(session)
        await out.final(session)
        await ws.close(code=1000)
    finally:
        if receiver is not None and not receiver.done():
            receiver.cancel()
            try:
                await receiver
            except asyncio.CancelledError:
                pass
        backlog.close()


def _diarize_config(engine: Engine, config: dict) -> tuple[bool, Optional[int]]:
    """(diarize, num_speakers) of the session's configuration (taken out of it). Raises _BadMessage."""
    from ..options import parse_bool

    value = config.pop("diarize", None)
    try:
        diarize = parse_bool(value) if isinstance(value, str) else bool(value) if value is not None else False
    except ValueError:
        raise _BadMessage(f"diarize must be true or false; got {value!r}") from None
    count = config.pop("num_speakers", None)
    num_speakers = None
    if count is not None and count != "":
        try:
            if isinstance(count, bool) or isinstance(count, float) and not count.is_integer():
                raise ValueError
            num_speakers = int(count)
        except (TypeError, ValueError):
            raise _BadMessage(f"num_speakers must be an integer; got {count!r}") from None
        if not diarize:
            raise _BadMessage("num_speakers needs diarize: true")
    if not diarize:
        return False, None
    if engine.diarizer is None:
        raise _BadMessage("this server has no diarizer: diarize needs one, loaded at start with "
                          "`transcribe serve --diarizer MODEL` (a streaming Sortformer model)")
    if num_speakers is not None:
        from ..diarization import check_num_speakers
        from ..errors import OptionValueError

        try:
            check_num_speakers(num_speakers, getattr(engine.diarizer, "max_speakers", None))
        except OptionValueError as e:
            raise _BadMessage(str(e)) from None
    return True, num_speakers


def _public(model_id: Optional[str]) -> Optional[str]:
    return public_name(model_id) if model_id else None


def _check_frame(data: bytes) -> None:
    if len(data) > MAX_FRAME_BYTES:
        raise _BadMessage(f"a frame holds at most {MAX_FRAME_BYTES} bytes; got {len(data)}")


async def _receive(ws: WebSocket, backlog: "_Backlog", idle_s: float = IDLE_S) -> None:
    """Reads the socket until "end", a bad message, `idle_s` seconds without a message or the client
    leaving, all the while the model runs: audio into the backlog, the end (or the error) handed to
    it for the session's loop."""
    try:
        while True:
            message = await _within(ws, idle_s)
            if message["type"] == "websocket.disconnect":
                # Closed without "end": nobody is left to read a final message.
                backlog.finish(WebSocketDisconnect(message.get("code", 1000)))
                return
            if message.get("bytes") is not None:
                _check_frame(message["bytes"])
                await backlog.put(message["bytes"])
                continue
            body = _json(message.get("text") or "")
            kind = body.get("type")
            if kind == "end":
                backlog.finish("end")
                return
            if kind in ("start", "config", "session.update"):
                raise _BadMessage("the session is configured by the first message only")
            raise _BadMessage(f"unknown message type {kind!r} (send binary PCM frames, or {{\"type\": \"end\"}})")
    except Exception as e:  # noqa: BLE001 - raised in the session's loop
        backlog.finish(e)


class _Backlog:
    """The audio a socket has received and its session has not yet taken, first in, first out: up
    to MEMORY_BYTES in memory, the newer rest in an anonymous temporary file (gone when closed).
    `put` waits while `limit` bytes are held (the socket's reads pause: TCP slows the client).
    `finish` ends it: with "end" the audio held is still taken; with an exception (a bad message,
    the client leaving) `get` raises it at once."""

    def __init__(self, limit: int, memory_bytes: int = MEMORY_BYTES):
        self.limit = max(1, limit)
        self.memory_bytes = memory_bytes
        self.size = 0  # bytes held
        self._memory: deque = deque()  # the oldest pieces
        self._in_memory = 0
        self._file = None
        self._written = 0  # bytes written to the file
        self._read = 0  # bytes of it taken
        self._end: Union[None, str, BaseException] = None
        self._ready = asyncio.Event()  # something to take, or the end
        self._room = asyncio.Event()  # under the limit
        self._room.set()

    async def put(self, data: bytes) -> None:
        if not data:
            return
        if self._read < self._written or self._in_memory + len(data) > self.memory_bytes:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="transcribe-stream-", buffering=0)
            self._file.seek(self._written)
            self._file.write(data)
            self._written += len(data)
        else:
            self._memory.append(data)
            self._in_memory += len(data)
        self.size += len(data)
        self._ready.set()
        while self.size >= self.limit and self._end is None:
            self._room.clear()
            await self._room.wait()

    def finish(self, end: Union[str, BaseException]) -> None:
        if self._end is None:
            self._end = end
        self._ready.set()
        self._room.set()

    async def get(self, most: int) -> Optional[bytes]:
        """The next audio held (at most `most` bytes, or one piece), waiting for it; None at the
        end; raises the exception the backlog was finished with."""
        while True:
            if isinstance(self._end, BaseException):
                raise self._end
            if self.size:
                return self._take(most)
            if self._end is not None:
                return None
            self._ready.clear()
            await self._ready.wait()

    def _take(self, most: int) -> bytes:
        pieces, n = [], 0
        while self._memory and (not pieces or n + len(self._memory[0]) <= most):
            piece = self._memory.popleft()
            pieces.append(piece)
            n += len(piece)
        self._in_memory -= n
        if not self._memory and n < most and self._read < self._written:
            self._file.seek(self._read)
            piece = self._file.read(min(most - n, self._written - self._read))
            self._read += len(piece)
            pieces.append(piece)
            n += len(piece)
            if self._read == self._written:  # the file is emptied: start it anew
                self._file.truncate(0)
                self._read = self._written = 0
        self.size -= n
        if self.size < self.limit:
            self._room.set()
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def close(self) -> None:
        self.finish("closed")
        self._memory.clear()
        if self._file is not None:
            self._file.close()
            self._file = None


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
    """Sends a session's news as `transcribe --stream --format jsonl` prints it (streaming.StreamMessages:
    each word after a partial that contains it, an utterance's whole text before its end), then the final
    message. Words and events are released once sent."""

    def __init__(self, ws: WebSocket, session):
        self.ws = ws
        self.messages = StreamMessages(session, keep=False)

    async def update(self, session) -> None:
        for obj in self.messages.take():
            await self.ws.send_text(json.dumps(obj, ensure_ascii=False))

    async def final(self, session) -> None:
        final = {"type": "final", "text": self.messages.final_text(), "duration": session.latency.received_ms / 1000.0}
        if getattr(session, "diarizing", False):
            final["speakers"] = [t.to_dict() for t in session.speaker_turns()]
        await self.ws.send_text(json.dumps(final, ensure_ascii=False))
