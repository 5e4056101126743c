"""`transcribe serve`: the real server on a loopback port, driven by the official `openai`
client, a `websockets` client and raw HTTP (for the requests no good client sends).

Two servers run for the module: `plain` serves the default model alone, without a key (clients
name any model, e.g. whisper-1); `guarded` serves two models behind an API key with a 2 MB upload
limit. Expected texts come from the same model in this process (the command line's own path);
the server's results must equal them exactly (the server batches concurrent requests, and a batched
result equals the single one).
"""
from __future__ import annotations

import asyncio
import http.client
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
import wave
from pathlib import Path

import numpy as np
import pytest

from .conftest import AUDIO, REPO, TINY

openai = pytest.importorskip("openai", reason="the server tests need the test extra: pip install -e '.[test]'")
websockets = pytest.importorskip("websockets", reason="the server tests need the test extra")
pytest.importorskip("fastapi", reason="the server tests need the test extra")
pytest.importorskip("uvicorn", reason="the server tests need the test extra")
from websockets.exceptions import ConnectionClosedError, InvalidStatus  # noqa: E402

SAMPLE = REPO / "samples" / "sample.wav"
JFK = AUDIO / "jfk.wav"
KEY = "test-key-" + uuid.uuid4().hex[:8]
STREAMING = TINY / "tiny-tdt-streaming-random.nemo"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`transcribe serve ARGS` in a subprocess on a free port (or, with `code`, that Python code run with
    the server's arguments: a test that sets module constants first)."""

    def __init__(self, args: list[str], tmp: Path, code: str | None = None):
        self.port = _free_port()
        self.tmp = tmp
        self.log = open(tmp / "server.log", "w+")
        env = dict(os.environ, TMPDIR=str(tmp / "spool"), PYTHONUNBUFFERED="1")
        (tmp / "spool").mkdir()
        command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "transcribe", "serve"]
        self.proc = subprocess.Popen([*command, "--port", str(self.port), "--log-level", "warning", *args],
                                     cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}):\n{self.output()}")
            try:
                status, _, _ = self.request("GET", "/health")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the server did not come up:\n{self.output()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def request(self, method: str, path: str, body: bytes = b"", headers: dict | None = None, timeout: float = 120):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.putrequest(method, path)
            for k, v in {**(headers or {}), "Content-Length": str(len(body))}.items():
                conn.putheader(k, v)
            conn.endheaders()
            try:
                conn.send(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused before the body was read (413): the answer is waiting
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    s = Server([], tmp_path_factory.mktemp("plain"))
    yield s
    output = s.output()
    s.stop()
    # A clean shutdown on SIGTERM: uvicorn finishes, then lets the signal end the process.
    assert s.proc.returncode in (0, -15), output


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    s = Server(["--model", "tiny.en", "--model", str(STREAMING), "--api-key", KEY, "--max-upload-mb", "2"],
               tmp_path_factory.mktemp("guarded"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def model():
    import transcribe

    return transcribe.load_model()


def _cli(capsys, *args) -> str:
    from transcribe.cli import main

    capsys.readouterr()
    assert main([*args, "-q"]) == 0
    return capsys.readouterr().out


def multipart(fields: dict, files: dict | None = None, boundary: str = "b0undary") -> tuple[bytes, dict]:
    out = io.BytesIO()
    for name, value in fields.items():
        for v in value if isinstance(value, list) else [value]:
            out.write(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{v}\r\n".encode())
    for name, (filename, data) in (files or {}).items():
        out.write(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n"
                  f"Content-Type: application/octet-stream\r\n\r\n".encode())
        out.write(data + b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue(), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def _error(status_body) -> dict:
    status, _, body = status_body
    doc = json.loads(body)
    assert set(doc) == {"error"} and set(doc["error"]) == {"message", "type", "param", "code"}, doc
    assert doc["error"]["message"]
    return doc["error"]


# ---------------------------------------------------------------------------------------------- OpenAI client


def test_health_and_models(plain, guarded):
    status, _, body = plain.request("GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    client = openai.OpenAI(base_url=plain.url, api_key="unused")
    assert [m.id for m in client.models.list()] == ["tiny.en"]
    # /health needs no key; everything else does.
    assert guarded.request("GET", "/health")[0] == 200
    ids = [m.id for m in openai.OpenAI(base_url=guarded.url, api_key=KEY).models.list()]
    assert ids == ["tiny.en", str(STREAMING)]
    err = _error(guarded.request("GET", "/v1/models"))
    assert err["code"] == "invalid_api_key"
    assert guarded.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=guarded.url, api_key="wrong").models.list()


def test_openai_client_text_equals_the_command(plain, capsys):
    client = openai.OpenAI(base_url=plain.url, api_key="unused")
    with open(SAMPLE, "rb") as f:
        r = client.audio.transcriptions.create(model="whisper-1", file=f)
    assert r.text + "\n" == _cli(capsys, str(SAMPLE))
    assert r.text.startswith("The quick brown fox")
    with open(SAMPLE, "rb") as f:
        text = client.audio.transcriptions.create(model="whisper-1", file=f, response_format="text")
    assert text == _cli(capsys, str(SAMPLE))


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_subtitles_equal_the_command(plain, capsys, fmt):
    client = openai.OpenAI(base_url=plain.url, api_key="unused")
    with open(SAMPLE, "rb") as f:
        body = client.audio.transcriptions.create(model="whisper-1", file=f, response_format=fmt)
    assert body == _cli(capsys, str(SAMPLE), "--format", fmt)
    assert ("WEBVTT" in body) == (fmt == "vtt") and "-->" in body


def test_verbose_json_segments_and_words(plain, model):
    client = openai.OpenAI(base_url=plain.url, api_key="unused")
    with open(JFK, "rb") as f:
        r = client.audio.transcriptions.create(model="whisper-1", file=f, response_format="verbose_json",
                                               timestamp_granularities=["word", "segment"])
    expected = model.transcribe(str(JFK), word_timestamps=True)
    assert r.text == expected.text and r.language == "english"
    assert r.duration == pytest.approx(11.0, abs=0.01)
    assert [s.text for s in r.segments] == [s.text for s in expected.segments]
    for i, s in enumerate(r.segments):
        assert s.id == i and s.start <= s.end and s.tokens and s.temperature == 0.0
        assert s.avg_logprob < 0 and 0 <= s.no_speech_prob <= 1 and s.compression_ratio > 0
    assert [w.word for w in r.words] == [w.word for w in expected.words]
    starts = [w.start for w in r.words]
    assert starts == sorted(starts) and all(w.start <= w.end <= 11.0 for w in r.words)
    # Segment granularity alone (the default): segments, no words.
    with open(JFK, "rb") as f:
        r = client.audio.transcriptions.create(model="whisper-1", file=f, response_format="verbose_json")
    assert r.segments and not r.words


def test_stream_deltas_join_to_the_text(plain):
    client = openai.OpenAI(base_url=plain.url, api_key="unused")
    with open(JFK, "rb") as f:
        whole = client.audio.transcriptions.create(model="whisper-1", file=f).text
    with open(JFK, "rb") as f:
        events = list(client.audio.transcriptions.create(model="whisper-1", file=f, stream=True))
    kinds = [e.type for e in events]
    assert kinds[-1] == "transcript.text.done" and set(kinds[:-1]) == {"transcript.text.delta"}
    assert "".join(e.delta for e in events[:-1]) == events[-1].text == whole


def test_fields_it_does_not_use_are_ignored(plain, capsys):
    """OpenAI fields that mean nothing here and unknown fields never break a request."""
    client = openai.OpenAI(base_url=plain.url, api_key="unused")
    with open(SAMPLE, "rb") as f:
        r = client.audio.transcriptions.create(
            model="gpt-4o-transcribe", file=f, include=["logprobs"], chunking_strategy="auto", language="en",
            prompt="", extra_body={"known_speaker_names[]": "ann", "something_new": "1"})
    assert r.text + "\n" == _cli(capsys, str(SAMPLE))


def test_an_option_a_model_cannot_honour_is_refused_in_the_words_of_the_command(guarded, capsys):
    """One rule on every surface: what the command refuses, the server refuses (400), in the same
    sentence, each naming the option as it spells it (--initial-prompt, prompt); temperature 0 (the API's
    default) asks nothing of a model."""
    def post(fields):
        body, headers = multipart(fields, {"file": ("a.wav", SAMPLE.read_bytes())})
        return guarded.request("POST", "/v1/audio/transcriptions", body, {**headers, "Authorization": f"Bearer {KEY}"})

    def cli_error(*args) -> str:
        from transcribe.cli import main

        assert main([str(SAMPLE), *args]) == 2
        return capsys.readouterr().err.strip().removeprefix("transcribe: error: ")

    parakeet = STREAMING.name
    cases = [  # (form fields, the command's arguments, the param named, the form's spelling of the command's words)
        ({"model": parakeet, "language": "de"}, ["--model", str(STREAMING), "--language", "de"], "language",
         {"--language": "language"}),
        ({"model": parakeet, "temperature": "0.4"}, ["--model", str(STREAMING), "--temperature", "0.4"], "temperature",
         {"--temperature": "temperature"}),
        ({"model": parakeet, "prompt": "Kennedy"}, ["--model", str(STREAMING), "--initial-prompt", "Kennedy"],
         "prompt", {"--initial-prompt": "prompt"}),
        ({"model": "tiny.en", "hotwords": "Kennedy"}, ["--hotwords", "Kennedy"], "hotwords",
         {"--hotwords": "hotwords"}),
        ({"model": "tiny.en", "patience": "2", "beam_size": "2", "nbest": "2"},
         ["--beam-size", "2", "--nbest", "2", "--patience", "2"], "nbest", {"--nbest": "nbest"}),
        ({"model": "tiny.en", "language": "de"}, ["--language", "de"], "language", {}),
        ({"model": "tiny.en", "language": "xx"}, ["--language", "xx"], "language", {}),
    ]
    for fields, args, param, spelling in cases:
        status, _, raw = post(fields)
        err = json.loads(raw)["error"]
        assert status == 400 and err["param"] == param, (fields, err)
        words = cli_error(*args)
        for flag, field in spelling.items():
            words = words.replace(flag, field)
        assert err["message"] == words, (fields, err["message"], words)
    # The model given as a path is also named by its file's name and stem; temperature 0 is the default.
    for name in (parakeet, STREAMING.stem):
        status, _, raw = post({"model": name, "temperature": "0", "language": ""})
        assert status == 200, raw
    # A translation by an English-only model, and by a Parakeet model: refused with the model's words.
    body, headers = multipart({"model": "tiny.en"}, {"file": ("a.wav", SAMPLE.read_bytes())})
    status, _, raw = guarded.request("POST", "/v1/audio/translations", body, {**headers, "Authorization": f"Bearer {KEY}"})
    assert status == 400 and json.loads(raw)["error"]["message"] == cli_error("--task", "translate")


def test_translation_needs_a_multilingual_model(plain, guarded):
    client = openai.OpenAI(base_url=plain.url, api_key="unused")
    with open(SAMPLE, "rb") as f, pytest.raises(openai.BadRequestError) as e:
        client.audio.translations.create(model="whisper-1", file=f)
    assert "translate" in str(e.value)
    body, headers = multipart({"model": str(STREAMING)}, {"file": ("a.wav", SAMPLE.read_bytes())})
    err = _error(guarded.request("POST", "/v1/audio/translations", body, {**headers, "Authorization": f"Bearer {KEY}"}))
    assert err["code"] == "unsupported_option" and err["param"] == "task" and "does not take task" in err["message"]


def test_two_models_pick_by_id(guarded, capsys):
    client = openai.OpenAI(base_url=guarded.url, api_key=KEY)
    with open(SAMPLE, "rb") as f:
        r = client.audio.transcriptions.create(model=str(STREAMING), file=f, extra_body={"beam_size": "2"})
    assert r.text == _cli(capsys, str(SAMPLE), "--model", str(STREAMING), "--beam-size", "2").rstrip("\n")
    with open(SAMPLE, "rb") as f, pytest.raises(openai.NotFoundError) as e:
        client.audio.transcriptions.create(model="whisper-1", file=f)
    assert e.value.body["code"] == "model_not_found"


# ---------------------------------------------------------------------------------------------- bad requests


def _wav_bytes(path: Path) -> bytes:
    return path.read_bytes()


def test_bad_requests_get_errors_and_the_server_goes_on(guarded, capsys):
    auth = {"Authorization": f"Bearer {KEY}"}

    def post(fields, files=None, raw=None, headers=None):
        body, h = multipart(fields, files) if raw is None else (raw, {})
        return guarded.request("POST", "/v1/audio/transcriptions", body, {**h, **auth, **(headers or {})})

    wav = SAMPLE.read_bytes()
    cases = {
        "no file": (post({"model": "tiny.en"}), 400, "file"),
        "file as text": (post({"model": "tiny.en", "file": "hello"}), 400, "file"),
        "a text file": (post({"model": "tiny.en"}, {"file": ("notes.txt", b"just some text\n" * 50)}), 400, "file"),
        "an empty file": (post({"model": "tiny.en"}, {"file": ("empty.wav", b"")}), 400, "file"),
        "a truncated wav": (post({"model": "tiny.en"}, {"file": ("cut.wav", wav[:30])}), 400, "file"),
        "unknown model": (post({"model": "whisper-1"}, {"file": ("a.wav", wav)}), 404, "model"),
        "no model": (post({}, {"file": ("a.wav", wav)}), 400, "model"),
        "bad format": (post({"model": "tiny.en", "response_format": "xml"}, {"file": ("a.wav", wav)}), 400,
                       "response_format"),
        "bad language": (post({"model": "tiny.en", "language": "xx"}, {"file": ("a.wav", wav)}), 400, "language"),
        "english-only model": (post({"model": "tiny.en", "language": "de"}, {"file": ("a.wav", wav)}), 400,
                               "language"),
        "bad temperature": (post({"model": "tiny.en", "temperature": "2"}, {"file": ("a.wav", wav)}), 400,
                            "temperature"),
        "bad granularity": (post({"model": "tiny.en", "timestamp_granularities[]": "char"},
                                 {"file": ("a.wav", wav)}), 400, "timestamp_granularities"),
        "truncated multipart": (post({}, raw=b"--b0undary\r\nContent-Disposition: form-data; name=\"file\"; "
                                     b"filename=\"a.wav\"\r\n\r\nRIFF",
                                     headers={"Content-Type": "multipart/form-data; boundary=b0undary"}), 400,
                                "file"),  # cut before its closing boundary: the file part never completes
        "multipart without a boundary": (post({}, raw=b"--x\r\n\r\n",
                                              headers={"Content-Type": "multipart/form-data"}), 400, None),
        "part without a disposition": (post({}, raw=b"--b0undary\r\nContent-Type: text/plain\r\n\r\nx\r\n"
                                            b"--b0undary--\r\n",
                                            headers={"Content-Type": "multipart/form-data; boundary=b0undary"}),
                                       400, None),
        "not multipart": (post({}, raw=b"{\"file\": 1}", headers={"Content-Type": "application/json"}), 400, "file"),
        "wrong key": (guarded.request("POST", "/v1/audio/transcriptions", *_swap_key(multipart(
            {"model": "tiny.en"}, {"file": ("a.wav", wav)})), timeout=30), 401, None),
    }
    for name, (response, status, param) in cases.items():
        assert response[0] == status, (name, response)
        err = _error(response)
        assert err["param"] == param, (name, err)
    # A body over the limit (2 MB): refused from its declared length, unread.
    big = np.zeros(16000 * 70, np.int16).tobytes()  # 2.2 MB
    response = post({"model": "tiny.en"}, {"file": ("big.raw", big)})
    assert response[0] == 413 and _error(response)["code"] == "file_too_large"
    assert "the server's limit of 2 MB" in _error(response)["message"]  # as --max-upload-mb gave it
    # ... and sent without a length (chunked): read up to the limit, then refused.
    response = _chunked_post(guarded.port, *multipart({"model": "tiny.en"}, {"file": ("big.wav", _wav(big))}), auth)
    assert response[0] == 413 and _error(response)["code"] == "file_too_large"
    # The server still answers a good request correctly, and left no spooled upload behind.
    response = post({"model": "tiny.en"}, {"file": ("a.wav", wav)})
    assert response[0] == 200 and json.loads(response[2])["text"] + "\n" == _cli(capsys, str(SAMPLE))
    assert list((guarded.tmp / "spool").iterdir()) == []
    assert guarded.proc.poll() is None


def _swap_key(body_headers):
    body, headers = body_headers
    return body, {**headers, "Authorization": "Bearer not-the-key"}


def _wav(pcm16: bytes) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm16)
    return out.getvalue()


def _chunked_post(port: int, body: bytes, headers: dict, auth: dict):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.putrequest("POST", "/v1/audio/transcriptions")
        for k, v in {**headers, **auth, "Transfer-Encoding": "chunked"}.items():
            conn.putheader(k, v)
        conn.endheaders()
        try:
            for i in range(0, len(body), 64 * 1024):
                piece = body[i:i + 64 * 1024]
                conn.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            conn.send(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server stopped reading at the limit: its answer is waiting
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def test_uploads_of_other_containers_and_rates(plain, model, tmp_path):
    """A 44.1 kHz stereo FLAC decodes like any file (resampled, mixed)."""
    import soundfile as sf
    from transcribe.audio import load_audio

    pcm = load_audio(str(JFK), sample_rate=44100)
    path = tmp_path / "jfk.flac"
    sf.write(path, np.stack([pcm, pcm], axis=1), 44100)
    client = openai.OpenAI(base_url=plain.url, api_key="unused")
    with open(path, "rb") as f:
        r = client.audio.transcriptions.create(model="whisper-1", file=f)
    assert r.text == model.transcribe(str(path)).text


# ---------------------------------------------------------------------------------------------- live streaming


def _pcm16(path: Path) -> np.ndarray:
    from transcribe.audio import load_audio

    return np.clip(np.round(load_audio(str(path), sample_rate=16000) * 32768), -32768, 32767).astype(np.int16)


async def _stream(url: str, pcm: np.ndarray, start: dict | None = None, headers=None) -> list[dict]:
    events = []
    async with websockets.connect(url, additional_headers=headers or {}) as ws:
        if start is not None:
            await ws.send(json.dumps({"type": "start", **start}))
        step = 1600  # 100 ms frames

        async def reader():
            async for message in ws:
                events.append(json.loads(message))

        task = asyncio.ensure_future(reader())
        for i in range(0, len(pcm), step):
            await ws.send(pcm[i:i + step].tobytes())
        await ws.send(json.dumps({"type": "end"}))
        await asyncio.wait_for(task, 300)
    return events


def _offline_stream(model, pcm: np.ndarray, rate: int = 16000, **options) -> str:
    """The text of the model's streaming session fed `pcm` in 100 ms pieces, in this process."""
    session = model.stream(**options)
    text = ""
    step = rate // 10
    for i in range(0, len(pcm), step):
        session.feed(pcm[i:i + step], rate)
        text += session.take_new_text()
    session.finalize()
    text += session.take_new_text()
    return " ".join(u.strip() for u in text.split("\n") if u.strip())


def test_websocket_streams_jfk(plain, model):
    pcm = _pcm16(JFK)
    events = asyncio.run(_stream(f"ws://127.0.0.1:{plain.port}/v1/audio/stream", pcm))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session" and kinds[-1] == "final" and "partial" in kinds and "word" in kinds
    assert events[0]["model"] == "tiny.en" and events[0]["sample_rate"] == 16000
    final = events[-1]
    assert final["text"] == _offline_stream(model, pcm)
    assert final["text"].startswith("And so")
    assert final["duration"] == pytest.approx(len(pcm) / 16000)
    words = [e for e in events if e["type"] == "word"]
    assert " ".join(w["word"] for w in words) == final["text"]
    assert all(a["start"] <= b["start"] for a, b in zip(words, words[1:]))


def test_websocket_messages_are_in_time_order(plain, guarded):
    """As `transcribe --stream --format jsonl` prints them (tests/test_stream_order.py's checks): each word
    after a partial that holds it at its place, words and events in time order, word times monotonic and
    non-overlapping (the issue's Whisper stream had "not" 3.86-4.68 and "what" from 4.52); for the
    buffered Whisper windows and a cache-aware Parakeet model."""
    from .test_stream_order import check_jsonl, check_time_order

    runs = [(f"ws://127.0.0.1:{plain.port}/v1/audio/stream", None, {}),
            (f"ws://127.0.0.1:{guarded.port}/v1/audio/stream", {"model": str(STREAMING)},
             {"Authorization": f"Bearer {KEY}"})]
    for url, start, headers in runs:
        for clip in (JFK, AUDIO / "dev" / "fleurs_en_000.wav"):
            events = asyncio.run(_stream(url, _pcm16(clip), start, headers))
            assert events[0]["type"] == "session" and events[-1]["type"] == "final"
            items = check_jsonl(events[1:])
            check_time_order(items)
            assert [w.word for w in items if hasattr(w, "word")], (url, clip)


def test_websocket_sessions_at_once_and_one_that_leaves(plain, model):
    """Three sockets stream at once, each its own session; a fourth hangs up mid-stream (its
    session is dropped) and the others still get their whole text."""
    pcm = _pcm16(JFK)
    url = f"ws://127.0.0.1:{plain.port}/v1/audio/stream"

    async def leaver():
        async with websockets.connect(url) as ws:
            for i in range(0, len(pcm) // 2, 1600):
                await ws.send(pcm[i:i + 1600].tobytes())
        return "left"

    async def all_of_them():
        return await asyncio.gather(leaver(), *[_stream(url, pcm) for _ in range(3)])

    left, *runs = asyncio.run(all_of_them())
    expected = _offline_stream(model, pcm)
    assert left == "left"
    assert [events[-1]["text"] for events in runs] == [expected] * 3
    assert plain.request("GET", "/health")[0] == 200


def test_websocket_cache_aware_model_at_another_rate(guarded):
    """A cache-aware Parakeet model streams natively; 8 kHz float frames are resampled."""
    import transcribe
    from transcribe.audio import load_audio

    pcm8 = load_audio(str(JFK), sample_rate=8000)
    expected = _offline_stream(transcribe.load_model(str(STREAMING)), pcm8, rate=8000)

    async def run():
        events = []
        async with websockets.connect(f"ws://127.0.0.1:{guarded.port}/v1/audio/stream",
                                      additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            await ws.send(json.dumps({"type": "start", "model": str(STREAMING), "sample_rate": 8000,
                                      "encoding": "pcm_f32le"}))
            for i in range(0, len(pcm8), 800):
                await ws.send(pcm8[i:i + 800].astype("<f4").tobytes())
            await ws.send(json.dumps({"type": "end"}))
            async for message in ws:
                events.append(json.loads(message))
        return events

    events = asyncio.run(run())
    assert events[0]["type"] == "session" and events[-1]["type"] == "final"
    assert events[0]["chunk_ms"] > 0
    assert events[-1]["text"] == expected
    assert events[-1]["duration"] == pytest.approx(len(pcm8) / 8000, abs=1e-3)


def test_websocket_refusals(guarded):
    async def run(headers, first):
        async with websockets.connect(f"ws://127.0.0.1:{guarded.port}/v1/audio/stream",
                                      additional_headers=headers) as ws:
            await ws.send(first)
            messages = []
            try:
                async for m in ws:
                    messages.append(json.loads(m))
            except ConnectionClosedError:
                pass  # closed with an error code: read below
            return messages, ws.close_code

    with pytest.raises(InvalidStatus):
        asyncio.run(run({}, b"\0\0"))  # no key: refused before the handshake completes
    auth = {"Authorization": f"Bearer {KEY}"}
    messages, code = asyncio.run(run(auth, json.dumps({"type": "start", "model": "nope"})))
    assert messages[-1]["type"] == "error" and "nope" in messages[-1]["message"] and code == 1003
    messages, code = asyncio.run(run(auth, json.dumps({"type": "start", "model": "tiny.en", "encoding": "mp3"})))
    assert messages[-1]["type"] == "error" and code == 1003
    messages, code = asyncio.run(run(auth, "not json"))
    assert messages[-1]["type"] == "error" and code == 1003
    # The rates a stream may declare are the rates any file is accepted at (audio_limits.MAX_RATE: 768 kHz).
    messages, code = asyncio.run(run(auth, json.dumps({"type": "start", "model": "tiny.en", "sample_rate": 768_001})))
    assert messages[-1]["type"] == "error" and "between 1000 and 768000" in messages[-1]["message"] and code == 1003


# ---------------------------------------------------------------------------------------------- load


def _dev_clips(n: int) -> list[Path]:
    rows = [json.loads(line) for line in (AUDIO / "dev" / "manifest.jsonl").read_text().splitlines() if line.strip()]
    rows.sort(key=lambda r: r["duration"])
    return [AUDIO / "dev" / r["audio"] for r in rows[:n]]


def test_concurrent_clients_are_batched_and_memory_returns(plain, model):
    clips = _dev_clips(8)
    expected = {c.name: model.transcribe(str(c)).text for c in clips}
    client = openai.OpenAI(base_url=plain.url, api_key="unused", max_retries=0, timeout=600)

    def one(path: Path) -> str:
        with open(path, "rb") as f:
            return client.audio.transcriptions.create(model="whisper-1", file=f).text

    results: dict = {}
    errors: list = []

    def worker(k: int, rounds: int = 4) -> None:
        try:
            for i in range(rounds):
                c = clips[(k + i) % len(clips)]
                results[(k, i)] = (c.name, one(c))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def load(rounds: int) -> None:
        threads = [threading.Thread(target=worker, args=(k, rounds)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    load(1)  # warm: every code path a batch takes has run once
    before = plain.rss_mb()
    results.clear()
    load(4)
    assert not errors, errors
    assert len(results) == 32
    for name, text in results.values():
        assert text == expected[name], name
    stats = json.loads(plain.request("GET", "/health")[2])["stats"]
    assert stats["largest_batch"] >= 2  # eight clients at once: the lane saw several waiting
    # Once idle, the server hands the batches' working memory back (malloc_trim): what is left
    # over the RSS before the load would be a leak. The trim runs right after the last batch.
    deadline = time.monotonic() + 30
    while True:
        after = plain.rss_mb()
        if after - before < 100 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert after - before < 100, (before, after)


def test_client_that_leaves_frees_its_work(plain):
    """While the lane is busy with a long input, requests whose clients hang up are dropped
    before they run; /health answers all the while."""
    from transcribe.audio import load_audio

    long = np.concatenate([load_audio(str(c), sample_rate=16000) for c in _dev_clips(37)[-12:]])
    body, headers = multipart({"model": "whisper-1"}, {"file": ("long.wav", _wav(
        (np.clip(long, -1, 1) * 32767).astype(np.int16).tobytes()))})
    short, _ = multipart({"model": "whisper-1"}, {"file": ("a.wav", SAMPLE.read_bytes())})
    before = json.loads(plain.request("GET", "/health")[2])["stats"]
    done = {}
    busy = threading.Thread(target=lambda: done.setdefault("long", plain.request(
        "POST", "/v1/audio/transcriptions", body, headers)))
    busy.start()
    time.sleep(1.0)  # the long request is decoded and running
    for _ in range(3):
        conn = http.client.HTTPConnection("127.0.0.1", plain.port, timeout=30)
        conn.request("POST", "/v1/audio/transcriptions", body=short, headers=headers)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
    health = plain.request("GET", "/health", timeout=30)
    assert health[0] == 200 and "long" not in done  # answered while the lane transcribes
    busy.join()
    assert done["long"][0] == 200
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stats = json.loads(plain.request("GET", "/health")[2])["stats"]
        if stats["dropped"] - before["dropped"] == 3:
            break
        time.sleep(0.2)
    assert stats["dropped"] - before["dropped"] == 3, stats
    assert stats["requests"] - before["requests"] == 4
    assert stats["batches"] - before["batches"] == 1  # the long one alone ran


# ---------------------------------------------------------------------------------------------- the command


def test_serve_command_errors():
    from transcribe.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2  # the address is taken
    assert main(["serve", "--port", str(_free_port()), "--model", "no-such-model-anywhere"]) == 2
    assert main(["serve", "--max-batch", "0"]) == 2
    assert main(["serve", "--help"]) == 0


# ---------------------------------------------------------------------------------------------- translation


def test_translation_with_a_multilingual_model():
    """A multilingual Whisper model (random weights, the tiny test layout) translates: the
    endpoint gives what the model gives with task='translate', and says so in verbose_json."""
    import uvicorn

    from transcribe.server import Engine, create_app

    from .test_whisper_multilingual import random_asr

    asr = random_asr("51865")
    app = create_app(Engine({"random-ml": asr}))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        with open(JFK, "rb") as f:
            r = client.audio.translations.create(model="whisper-1", file=f, response_format="verbose_json")
        expected = asr.transcribe(str(JFK), task="translate")
        assert r.text == expected.text and r.task == "translate"
        from transcribe.server.openai_api import language_name

        assert r.language == language_name(expected.language) != "unknown"
        with open(JFK, "rb") as f:  # a language the model does not know: 400, named
            with pytest.raises(openai.BadRequestError) as e:
                client.audio.transcriptions.create(model="whisper-1", file=f, language="xx")
        assert e.value.body["param"] == "language"
    finally:
        server.should_exit = True
        thread.join(30)


# ---------------------------------------------------------------------------------------------- the README


def _readme_block(marker: str) -> str:
    import re

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if marker in b]
    assert len(blocks) == 1, marker
    return blocks[0]


def test_readme_openai_call_works_as_written(plain, capsys):
    code = _readme_block("OpenAI(base_url=").replace("127.0.0.1:8000", f"127.0.0.1:{plain.port}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout == _cli(capsys, str(SAMPLE))


def test_readme_websocket_example_works_as_written(plain, model):
    code = _readme_block("websockets.connect(").replace("127.0.0.1:8000", f"127.0.0.1:{plain.port}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    import ast

    messages = [ast.literal_eval(line) for line in out.stdout.splitlines()]
    assert messages[0]["type"] == "session" and messages[-1]["type"] == "final"
    assert messages[-1]["text"] == _offline_stream(model, _pcm16(JFK))
