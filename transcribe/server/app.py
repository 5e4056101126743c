"""The HTTP application: OpenAI's audio endpoints, the model list, health, live streaming.

    POST /v1/audio/transcriptions   multipart: file, model, language, prompt, response_format,
                                    temperature, timestamp_granularities[], stream, diarize,
                                    num_speakers (+ extra fields)
    POST /v1/audio/translations     the same, into English (multilingual Whisper models)
    GET  /v1/models, /v1/models/{id}
    GET  /health                    200 once the models are loaded (never needs the API key; HEAD too;
                                    models by name, never by path)
    WS   /v1/audio/stream           live PCM in, partial text / words / events out (websocket.py)
    GET  /, /ui/...                 the web page and its files (ui.py; never needs the API key; not with ui=False)

Every request passes the guard first (_Guard: the Host and Origin checks of security.py, then the
API key, then the upload size). Errors have OpenAI's body, {"error": {"message", "type", "param", "code"}}; nothing a client
sends takes the process down, and uploads are spooled to anonymous temporary files that vanish
when the request ends, however it ends.
"""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect

from ..errors import AudioError, OptionsNotTaken, OptionValueError, TranscribeError
from .engine import Engine, NoSuchModel, Served, public_name
from .openai_api import ApiError, diarize_request, diarized_segment, error_body, field_name, render, request_options
from .security import Access

log = logging.getLogger("transcribe.server")

OPEN_PATHS = ("/health",)


class UploadTooLarge(Exception):
    pass


class _Guard:
    """ASGI middleware: the API key (every path but /health) and the upload size limit. A body
    declared larger than the limit is refused before it is read; one that grows past it (no or a
    false Content-Length) stops being read there."""

    def __init__(self, app, api_key: Optional[str], max_upload_bytes: int, access: Optional[Access] = None,
                 open_path=None):
        self.app = app
        self.open_path = open_path or (lambda path: False)  # more paths served without the key
        self.key = api_key.encode() if api_key else None
        self.limit = int(max_upload_bytes)
        self.access = access or Access()

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        refused = self._refused(scope)
        if refused is not None:
            log.warning("refused %s %s: %s", "WebSocket" if kind == "websocket" else scope.get("method"),
                        scope.get("path"), refused)
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": refused[:120]})
                return
            return await _send_json(send, 403, error_body(403, refused, None, "forbidden"))
        path = scope.get("path")
        if self.key is not None and path not in OPEN_PATHS and not self.open_path(path) and not self._authorized(scope):
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": "invalid API key"})
                return
            return await _send_json(send, 401, error_body(
                401, "Incorrect API key provided: send 'Authorization: Bearer <key>'.", None, "invalid_api_key"))
        if kind == "websocket":
            return await self.app(scope, receive, send)
        length = _header(scope, b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                return await _send_json(send, 400, error_body(400, "invalid Content-Length header"))
            if declared > self.limit:
                return await _send_json(send, 413, _too_large(self.limit))
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise UploadTooLarge()
            return message

        return await self.app(scope, counted, send)

    def _refused(self, scope) -> Optional[str]:
        """Why the Host or Origin checks refuse this request (security.Access), or None."""
        why = self.access.check_host(_header(scope, b"host"))
        if why is None:
            server = scope.get("server")
            why = self.access.check_origin(_header(scope, b"origin"), server[1] if server else None)
        return why

    def _authorized(self, scope) -> bool:
        auth = _header(scope, b"authorization") or ""
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        if not token and scope["type"] == "websocket":
            # Browsers cannot set headers on a WebSocket: the key may come as a subprotocol
            # "openai-insecure-api-key.<key>", as OpenAI's realtime API takes it.
            for proto in (_header(scope, b"sec-websocket-protocol") or "").split(","):
                proto = proto.strip()
                if proto.startswith("openai-insecure-api-key."):
                    token = proto[len("openai-insecure-api-key."):]
        return hmac.compare_digest(token.encode(), self.key)


def _header(scope, name: bytes) -> Optional[str]:
    for k, v in scope.get("headers", ()):
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def _too_large(limit: int) -> dict:
    """413's body, naming the limit as --max-upload-mb gives it (MB of 2**20 bytes), rounded as it was written."""
    mb = round(limit / 2**20, 3)
    return error_body(413, f"the upload is larger than the server's limit of {mb:g} MB ({limit} bytes)",
                      "file", "file_too_large")


async def _send_json(send, status: int, body: dict) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": data})


def _error(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


class ClientGone(Exception):
    pass


async def _unless_gone(request: Request, awaitable):
    """Awaits `awaitable`; if the client disconnects first, cancels it (its batch slot is freed)
    and raises ClientGone."""
    work = asyncio.ensure_future(awaitable)

    async def gone():
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watch = asyncio.ensure_future(gone())
    try:
        done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        work.cancel()
        watch.cancel()
        raise
    if work in done:
        watch.cancel()
        return work.result()
    work.cancel()
    raise ClientGone()


def create_app(engine: Engine, *, api_key: Optional[str] = None, max_upload_mb: float = 200.0,
               access: Optional[Access] = None, stream_idle_s: Optional[float] = None, ui: bool = True) -> Any:
    """The ASGI application serving `engine`'s models (wrapped in the key, size, Host and Origin guard:
    `access`, by default a server on loopback, security.Access), and the web page unless `ui` is False."""
    @contextlib.asynccontextmanager
    async def lifespan(app):
        engine.start()
        try:
            yield
        finally:
            await engine.stop()

    app = FastAPI(title="transcribe", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.engine = engine
    _add_error_handlers(app)
    _add_model_routes(app, engine)

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request):
        return await _audio(engine, request, "transcribe", max_upload_mb)

    @app.post("/v1/audio/translations")
    async def translations(request: Request):
        return await _audio(engine, request, "translate", max_upload_mb)

    from .websocket import add_stream_route

    add_stream_route(app, engine, stream_idle_s)
    open_path = None
    if ui:
        from .ui import add_ui_routes, is_ui_path

        add_ui_routes(app)
        open_path = is_ui_path
    return _Guard(app, api_key, int(max_upload_mb * 2**20), access, open_path)


def _add_error_handlers(app) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        message = {404: f"no such endpoint: {request.method} {request.url.path}",
                   405: f"method {request.method} is not allowed on {request.url.path}"}.get(
            exc.status_code, str(exc.detail))
        return JSONResponse(error_body(exc.status_code, message, None, None), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.exception("internal error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body(500, f"internal error: {type(exc).__name__}"), status_code=500)


def _add_model_routes(app, engine: Engine) -> None:
    """GET /health, /v1/models and /v1/models/{id}."""
    created = int(time.time())

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health():  # open to all: the models' names, not where they lie on this machine
        return {"status": "ok", "models": [public_name(n) for n in engine.models],
                "diarizer": public_name(engine.diarizer_id) if engine.diarizer is not None else None,
                "stats": engine.stats()}

    def model_object(name: str) -> dict:
        return {"id": name, "object": "model", "created": created, "owned_by": "transcribe",
                "family": engine.models[name].family}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_object(n) for n in engine.models]}

    @app.get("/v1/models/{name:path}")
    async def one_model(name: str):
        if name not in engine.models:
            return _error(ApiError(404, f"The model '{name}' does not exist", "model", "model_not_found"))
        return model_object(name)


async def _read_form(request: Request, max_upload_mb: float):
    """The request's multipart form, or the 413 response of an upload over the limit. Raises ApiError."""
    try:
        return await request.form(max_files=4, max_fields=200, max_part_size=1024 * 1024), None
    except ClientDisconnect:
        raise ClientGone("during the upload") from None
    except UploadTooLarge:
        return None, JSONResponse(_too_large(int(max_upload_mb * 2**20)), status_code=413,
                                  headers={"connection": "close"})
    except (MultiPartException, ValueError, KeyError, AssertionError) as e:
        raise ApiError(400, f"malformed multipart body: {e}", None, "invalid_multipart") from None


def _upload_and_fields(form) -> tuple[UploadFile, dict[str, list[str]]]:
    """The uploaded `file` and the text fields (each a list of the values given). Raises ApiError."""
    fields: dict[str, list[str]] = {}
    upload = None
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            if key == "file" and upload is None:
                upload = value
            continue
        fields.setdefault(key, []).append(value)
    if upload is None:
        if "file" in fields:
            raise ApiError(400, "'file' must be an uploaded file (multipart/form-data), not a text field",
                           "file", "invalid_value")
        raise ApiError(400, "a 'file' is required: the audio, as multipart/form-data", "file",
                       "missing_required_parameter")
    return upload, fields


async def _checked_options(engine: Engine, model, fields: dict, task: str):
    """request_options, checked by the model (which transcribes nothing), and the diarization a request
    asks for (openai_api.diarize_request: the server's diarizer, passed to the model). Raises ApiError."""
    options, fmt, grains, stream = request_options(fields, task)
    diarize, num_speakers = diarize_request(fields, fmt)
    if getattr(model, "diarizer", False):  # a diarizer served as the model: its transcript is who spoke when
        if num_speakers is not None:
            options["num_speakers"] = num_speakers
        diarize = False
    elif num_speakers is not None and not diarize:
        raise ApiError(400, "num_speakers needs diarize=true (or response_format=diarized_json)", "num_speakers",
                       "invalid_value")
    speakers = _diarize_options(engine, num_speakers) if diarize else {}
    try:
        await engine.check_options(model, options)
    except OptionsNotTaken as e:
        raise ApiError(400, e.spelled(field_name), field_name(e.names[0]), "unsupported_option") from None
    except OptionValueError as e:
        raise ApiError(400, e.spelled(field_name), field_name(e.option) if e.option else None, "invalid_value") from None
    except TranscribeError as e:
        raise ApiError(400, str(e), None, "invalid_value") from None
    return {**options, **speakers}, fmt, grains, stream


def _diarize_options(engine: Engine, num_speakers) -> dict:
    """The options that run the server's diarizer beside the model (one object shared by every request:
    the model keeps no state on it). Raises ApiError without a diarizer or for too many speakers."""
    if engine.diarizer is None:
        raise ApiError(400, "this server has no diarizer: diarize=true and response_format=diarized_json need "
                            "one, loaded at start with `transcribe serve --diarizer MODEL` (a Sortformer model)",
                       "diarize", "diarizer_not_loaded")
    options = {"diarize": True, "diarizer": engine.diarizer}
    if num_speakers is not None:
        from ..diarization import check_num_speakers

        try:
            check_num_speakers(num_speakers, getattr(engine.diarizer, "max_speakers", None))
        except OptionValueError as e:
            raise ApiError(400, str(e), "num_speakers", "invalid_value") from None
        options["num_speakers"] = num_speakers
    return options


async def _decoded(engine: Engine, request: Request, upload: UploadFile, rate: int):
    try:
        return await _unless_gone(request, engine.decode_audio(upload.file, rate))
    except AudioError as e:
        message = str(e)
        if message.startswith("<file object>: "):  # the spooled upload: name it by its filename
            message = f"{(upload.filename or 'file')[:200]}: {message[len('<file object>: '):]}"
        raise ApiError(400, f"could not decode the audio: {message}", "file", "invalid_audio") from None


async def _audio(engine: Engine, request: Request, task: str, max_upload_mb: float):
    """POST /v1/audio/transcriptions (task "transcribe") and /v1/audio/translations ("translate")."""
    engine.requests += 1
    form = None
    served, counted = None, False
    try:
        form, refused = await _read_form(request, max_upload_mb)
        if refused is not None:
            return refused
        upload, fields = _upload_and_fields(form)
        served = _pick(engine, fields.get("model", [None])[-1])
        served.preparing += 1
        counted = True
        model = served.model
        options, fmt, grains, stream = await _checked_options(engine, model, fields, task)
        pcm = await _decoded(engine, request, upload, int(model.sample_rate))
        if stream:
            counted = False
            return StreamingResponse(_sse(engine.submit(served, pcm, options, prepared=True), fmt),
                                     media_type="text/event-stream", headers={"cache-control": "no-cache"})
        try:
            counted = False  # engine.transcribe takes the request off the count as it queues it
            transcript = await _unless_gone(request, engine.transcribe(served, pcm, options, prepared=True))
        except TranscribeError as e:
            raise ApiError(400, str(e), None, "invalid_value") from None
        body, media = render(transcript, fmt, grains, task, model)
        if isinstance(body, dict):
            return JSONResponse(body)
        return PlainTextResponse(body, media_type=media) if media.startswith("text/plain") else \
            Response(body, media_type=media)
    except ApiError as e:
        return _error(e)
    except ClientGone as e:
        engine.dropped += 1
        client = request.client
        log.info("client %s disconnected %s (%s %s): dropped", f"{client.host}:{client.port}" if client else "?",
                 e.args[0] if e.args else "before its answer", request.method, request.url.path)
        return Response(status_code=499)  # nobody reads it: the client is gone
    finally:
        if counted:
            served.preparing -= 1
        if form is not None:
            await form.close()


def _pick(engine: Engine, name: Optional[str]) -> Served:
    try:
        return engine.pick(name)
    except NoSuchModel as e:
        if not name:
            raise ApiError(400, f"'model' is required: one of {', '.join(e.known)}", "model",
                           "missing_required_parameter") from None
        raise ApiError(404, f"The model '{name}' does not exist (this server has {', '.join(e.known)})",
                       "model", "model_not_found") from None


def sse_deltas(transcript) -> list[str]:
    """The text in pieces, a segment each, whose concatenation is exactly `transcript.text`."""
    text = transcript.text
    out: list[str] = []
    pos = 0
    for seg in transcript.segments:
        piece = seg.text.strip()
        if not piece:
            continue
        at = text.find(piece, pos)
        if at < 0:
            continue
        out.append(text[pos: at + len(piece)])
        pos = at + len(piece)
    if pos < len(text):
        if out:
            out[-1] += text[pos:]
        else:
            out.append(text[pos:])
    return out


async def _sse(future: asyncio.Future, fmt: str = "json"):
    """Server-sent events as OpenAI sends them: transcript.text.delta ..., transcript.text.done; with
    diarized_json, each segment's delta is followed by its `transcript.text.segment` event (OpenAI's
    TranscriptTextSegmentEvent: the segment of diarized_json). `future`: the queued request (cancelled
    if the client goes before its batch starts)."""
    def event(obj: dict) -> bytes:
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()

    try:
        transcript = await future
    except asyncio.CancelledError:
        future.cancel()
        raise
    except TranscribeError as e:
        yield event({"type": "error", "error": ApiError(400, str(e)).body()["error"]})
        return
    except Exception as e:  # noqa: BLE001 - told to the client; the server goes on
        log.exception("internal error in a streamed transcription")
        yield event({"type": "error", "error": ApiError(500, f"internal error: {type(e).__name__}").body()["error"]})
        return
    if fmt == "diarized_json":
        for i, seg in enumerate(transcript.segments):
            if seg.text.strip():
                yield event({"type": "transcript.text.delta", "delta": seg.text, "segment_id": f"seg_{i}"})
            yield event(diarized_segment(i, seg))
        yield event({"type": "transcript.text.done", "text": transcript.text})
        return
    for delta in sse_deltas(transcript):
        yield event({"type": "transcript.text.delta", "delta": delta})
    yield event({"type": "transcript.text.done", "text": transcript.text})
