"""`transcribe serve --diarizer M`: who spoke what over OpenAI's API (`diarize`, `num_speakers`,
`response_format=diarized_json`, speakers in `verbose_json` and the text formats) and over the live
WebSocket (`diarize: true`).

Most tests run the application in this process (uvicorn in a thread, as `transcribe serve` builds it)
with a stand-in recognizer whose words are scripted and the stand-in diarizer of test_stream_diarize
(its turns scripted): what is checked is the server's part, the shapes, the refusals and that the
one diarizer loaded at start is what every request runs. The WebSocket runs a real tiny model's live
session beside the stand-in diarizer. The last tests run `transcribe serve` itself with the tiny
Sortformer."""
from __future__ import annotations

import asyncio
import http.client
import io
import json
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import transcribe
from transcribe.audio import load_audio
from transcribe.diarization import attribute, speaker_at
from transcribe.errors import OptionsNotTaken
from transcribe.results import Segment, Transcript, Word
from transcribe.writers import WRITERS

from .conftest import REPO
from .test_stream_diarize import EOU, JFK, MIX0, OFFLINE, SCRIPT, SORTFORMER, FakeDiarizer

openai = pytest.importorskip("openai", reason="the server tests need the test extra: pip install -e '.[test]'")
websockets = pytest.importorskip("websockets", reason="the server tests need the test extra")
pytest.importorskip("fastapi", reason="the server tests need the test extra")
pytest.importorskip("uvicorn", reason="the server tests need the test extra")

DIARIZER_NAME = "stand-in-sortformer"


class StandIn:
    """A recognizer's contract as the server uses it, with scripted words (one every 0.5 s, six a
    segment); with diarize=True its transcript is attributed to SCRIPT's turns by the offline rule
    (`diarization.attribute`). Records every call."""

    family = "stand-in"
    kind = "Stand-in"
    name = "stand-in"
    sample_rate = 16000
    diarizer = False

    def __init__(self):
        self.calls: list[dict] = []

    def check_options(self, **options) -> None:
        unknown = set(options) - {"word_timestamps"}
        if unknown:
            raise OptionsNotTaken(self.name, self.kind, unknown)

    def transcribe(self, audio, batch_size=None, diarize=False, diarizer=None, num_speakers=None, **options):
        self.check_options(**options)
        single = not isinstance(audio, list)
        items = [audio] if single else audio
        self.calls.append({"inputs": len(items), "diarize": diarize, "diarizer": diarizer,
                           "num_speakers": num_speakers, **options})
        out = [script_transcript(len(pcm) / self.sample_rate, diarize) for pcm in items]
        return out[0] if single else out


def script_transcript(duration: float, diarize: bool) -> Transcript:
    words = [Word(f"w{i}", round(0.5 * i + 0.1, 3), round(0.5 * i + 0.4, 3)) for i in range(int(duration / 0.5))]
    segments = [Segment(" ".join(w.word for w in words[i:i + 6]), words[i].start, words[i:i + 6][-1].end,
                        words[i:i + 6]) for i in range(0, len(words), 6)]
    t = Transcript(" ".join(w.word for w in words), duration, segments, words, model="stand-in")
    return attribute(t, SCRIPT) if diarize else t


class InProcess:
    """The application `transcribe serve` builds (cli.build_server), for `models` and `diarizer`, on a
    free loopback port, in a thread."""

    def __init__(self, models: dict, diarizer=None):
        from transcribe.server import cli

        self.sock = cli._listen("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        argv = ["--host", "127.0.0.1", "--log-level", "warning"] + (["--diarizer", DIARIZER_NAME] if diarizer else [])
        args = cli._parser().parse_args(argv)
        self.server = cli.build_server(args, models, self.sock, diarizer)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def request(self, method: str, path: str, body: bytes = b"", headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request(method, path, body, {**(headers or {}), "Content-Length": str(len(body))})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def post(self, fields: dict, audio: bytes | None = None):
        body, headers = multipart(fields, {"file": ("jfk.wav", JFK.read_bytes() if audio is None else audio)})
        return self.request("POST", "/v1/audio/transcriptions", body, headers)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def multipart(fields: dict, files: dict, boundary: str = "d1ar1ze") -> tuple[bytes, dict]:
    out = io.BytesIO()
    for name, value in fields.items():
        for v in value if isinstance(value, list) else [value]:
            out.write(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{v}\r\n".encode())
    for name, (filename, data) in files.items():
        out.write(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n"
                  f"Content-Type: application/octet-stream\r\n\r\n".encode())
        out.write(data + b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue(), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def ok(answer) -> dict:
    status, headers, body = answer
    assert status == 200, body
    return json.loads(body)


def error(answer, param) -> str:
    status, _, body = answer
    assert status == 400, body
    doc = json.loads(body)["error"]
    assert doc["param"] == param and doc["type"] == "invalid_request_error", doc
    return doc["message"]


@pytest.fixture(scope="module")
def offline():
    return transcribe.load_model(str(OFFLINE))


@pytest.fixture(scope="module")
def servers(offline):
    """(the diarizing server, its stand-in recognizer, its diarizer; a server without a diarizer)."""
    stand_in, diarizer = StandIn(), FakeDiarizer(lag=60)
    with_diarizer = InProcess({"stand-in": stand_in, "tdt": offline}, diarizer)
    without = InProcess({"stand-in": StandIn(), "tdt": offline})
    yield with_diarizer, stand_in, diarizer, without
    with_diarizer.close()
    without.close()


def expected(diarize: bool = True) -> Transcript:
    return script_transcript(len(load_audio(JFK, sample_rate=16000)) / 16000, diarize)


# ---------------------------------------------------------------------------------------------- HTTP


def test_diarized_json_is_openai_s_shape(servers):
    s, stand_in, diarizer, _ = servers
    body = ok(s.post({"model": "stand-in", "response_format": "diarized_json"}))  # implies diarize
    t = expected()
    assert list(body) == ["task", "duration", "text", "segments", "usage"]
    assert body["task"] == "transcribe" and body["text"] == t.text
    assert body["duration"] == pytest.approx(t.duration) and body["usage"] == {"type": "duration", "seconds": 11}
    assert [list(seg) for seg in body["segments"]] == [["type", "id", "start", "end", "text", "speaker"]] * len(t.segments)
    assert [seg["id"] for seg in body["segments"]] == [f"seg_{i}" for i in range(len(t.segments))]
    assert {seg["type"] for seg in body["segments"]} == {"transcript.text.segment"}
    assert [(seg["text"], seg["speaker"], seg["start"], seg["end"]) for seg in body["segments"]] == \
        [(seg.text, seg.speaker, seg.start, seg.end) for seg in t.segments]
    assert {seg["speaker"] for seg in body["segments"]} == {"speaker_0", "speaker_1"}
    call = stand_in.calls[-1]
    assert call["diarize"] is True and call["diarizer"] is diarizer and call["num_speakers"] is None
    # OpenAI's own client reads it as its TranscriptionDiarized
    client = openai.OpenAI(base_url=s.url, api_key="unused")
    with open(JFK, "rb") as f:
        r = client.audio.transcriptions.create(model="stand-in", file=f, response_format="diarized_json")
    assert [(seg.id, seg.speaker, seg.text) for seg in r.segments] == [(seg["id"], seg["speaker"], seg["text"])
                                                                      for seg in body["segments"]]


def test_verbose_json_carries_speakers_when_diarized(servers):
    s, *_ = servers
    fields = {"model": "stand-in", "response_format": "verbose_json", "timestamp_granularities[]": ["word", "segment"]}
    plain = ok(s.post(fields))
    assert "speakers" not in plain
    assert all("speaker" not in seg for seg in plain["segments"]) and all("speaker" not in w for w in plain["words"])
    body = ok(s.post({**fields, "diarize": "true"}))
    t = expected()
    assert body["speakers"] == [{"speaker": x.speaker, "start": x.start, "end": x.end} for x in t.speakers]
    assert [seg["speaker"] for seg in body["segments"]] == [seg.speaker for seg in t.segments]
    assert [w["speaker"] for w in body["words"]] == [speaker_at(SCRIPT, w.start, w.end) for w in t.words]
    assert [seg["text"] for seg in body["segments"]] == [seg.text for seg in t.segments]  # split at speaker changes
    assert len(body["segments"]) > len(plain["segments"])


@pytest.mark.parametrize("fmt", ["text", "srt", "vtt"])
def test_text_formats_are_the_writers_with_speakers(servers, fmt):
    s, *_ = servers
    status, headers, body = s.post({"model": "stand-in", "response_format": fmt, "diarize": "true"})
    assert status == 200
    assert body.decode() == WRITERS["txt" if fmt == "text" else fmt](expected())
    assert "speaker_1" in body.decode()


def test_one_diarizer_serves_every_request_with_its_speaker_limit(servers):
    s, stand_in, diarizer, _ = servers
    ok(s.post({"model": "stand-in", "diarize": "true", "num_speakers": "2"}))
    ok(s.post({"model": "stand-in", "response_format": "diarized_json", "num_speakers": "1"}))
    first, second = stand_in.calls[-2:]
    assert first["diarizer"] is diarizer and second["diarizer"] is diarizer
    assert (first["num_speakers"], second["num_speakers"]) == (2, 1)
    ok(s.post({"model": "stand-in", "diarize": "false"}))
    assert stand_in.calls[-1]["diarize"] is False and stand_in.calls[-1]["diarizer"] is None


def test_requests_the_server_cannot_answer_get_400(servers):
    s, stand_in, _, without = servers
    for fields in ({"diarize": "true"}, {"response_format": "diarized_json"}, {"diarize": "1", "num_speakers": "2"}):
        message = error(without.post({"model": "stand-in", **fields}), "diarize")
        assert "--diarizer" in message and "no diarizer" in message
    calls = len(stand_in.calls)
    assert "at most 4" in error(s.post({"model": "stand-in", "diarize": "true", "num_speakers": "9"}), "num_speakers")
    error(s.post({"model": "stand-in", "diarize": "true", "num_speakers": "0"}), "num_speakers")
    error(s.post({"model": "stand-in", "diarize": "true", "num_speakers": "two"}), "num_speakers")
    assert "needs diarize" in error(s.post({"model": "stand-in", "num_speakers": "2"}), "num_speakers")
    error(s.post({"model": "stand-in", "diarize": "maybe"}), "diarize")
    error(s.post({"model": "stand-in", "diarize": "false", "response_format": "diarized_json"}), "diarize")
    assert len(stand_in.calls) == calls  # refused before any work
    ok(s.post({"model": "stand-in", "diarize": "true"}))  # and the server goes on


def test_streamed_diarized_json_sends_segment_events(servers):
    s, *_ = servers
    body, headers = multipart({"model": "stand-in", "response_format": "diarized_json", "stream": "true"},
                              {"file": ("jfk.wav", JFK.read_bytes())})
    status, headers, raw = s.request("POST", "/v1/audio/transcriptions", body, headers)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in raw.decode().split("\n") if line.startswith("data: ")]
    done = ok(s.post({"model": "stand-in", "response_format": "diarized_json"}))
    assert [e for e in events if e["type"] == "transcript.text.segment"] == done["segments"]
    deltas = [e for e in events if e["type"] == "transcript.text.delta"]
    assert [d["segment_id"] for d in deltas] == [seg["id"] for seg in done["segments"]]
    assert events[-1] == {"type": "transcript.text.done", "text": done["text"]}


def test_health_names_the_diarizer(servers):
    s, _, _, without = servers
    assert ok(s.request("GET", "/health"))["diarizer"] == DIARIZER_NAME
    assert ok(without.request("GET", "/health"))["diarizer"] is None
    assert [m["id"] for m in ok(s.request("GET", "/v1/models"))["data"]] == ["stand-in", "tdt"]  # models to name


# ---------------------------------------------------------------------------------------------- WebSocket


def pcm16(path) -> bytes:
    return (np.clip(load_audio(path, sample_rate=16000), -1, 1) * 32767).astype("<i2").tobytes()


async def live(port: int, start: dict | None, audio: bytes, query: str = "") -> list[dict]:
    """The messages of one session (up to the server's close: after "final", or after an "error"), read
    while the audio is sent."""
    from websockets.exceptions import ConnectionClosed

    out: list[dict] = []
    async with websockets.connect(f"ws://127.0.0.1:{port}/v1/audio/stream{query}", max_size=None) as ws:
        async def read():
            try:
                async for m in ws:
                    out.append(json.loads(m))
            except ConnectionClosed:  # an error closes with 1003, after its message
                pass

        reader = asyncio.ensure_future(read())
        try:
            if start is not None:
                await ws.send(json.dumps({"type": "start", **start}))
            for i in range(0, len(audio), 3200):
                await ws.send(audio[i:i + 3200])
            await ws.send(json.dumps({"type": "end"}))
        except ConnectionClosed:
            pass
        await reader
    return out


def labelled(messages: list[dict]) -> list[dict]:
    """The word messages with the speakers word_speakers messages gave them; checks each label comes once."""
    words = []
    for m in messages:
        if m["type"] == "word":
            words.append(dict(m))
        elif m["type"] == "word_speakers":
            assert m["first"] + len(m["speakers"]) <= len(words)
            for i, speaker in enumerate(m["speakers"], m["first"]):
                assert words[i]["speaker"] is None
                words[i]["speaker"] = speaker
    return words


def test_websocket_labels_the_words(servers):
    s, *_ = servers
    messages = asyncio.run(live(s.port, {"model": "tdt", "diarize": True, "num_speakers": 2}, pcm16(JFK)))
    assert messages[0]["type"] == "session" and messages[0]["diarizer"] == DIARIZER_NAME
    final = messages[-1]
    assert final["type"] == "final" and [t["speaker"] for t in final["speakers"]] == ["speaker_0", "speaker_1", "speaker_0"]
    words = labelled(messages)
    assert len(words) > 10 and any(m["type"] == "word_speakers" for m in messages)
    assert [w["speaker"] for w in words] == [speaker_at(SCRIPT, w["start"], w["end"]) for w in words]
    # the query parameter says it too
    again = asyncio.run(live(s.port, {"model": "tdt"}, pcm16(JFK), "?diarize=true"))
    assert [w["speaker"] for w in labelled(again)] == [w["speaker"] for w in words]
    # without diarize nothing changes
    plain = asyncio.run(live(s.port, {"model": "tdt"}, pcm16(JFK)))
    assert "diarizer" not in plain[0] and "speakers" not in plain[-1]
    assert not any(m["type"] == "word_speakers" for m in plain)


def test_websocket_refusals(servers):
    s, _, _, without = servers
    audio = pcm16(JFK)[:32000]
    cases = [(without.port, {"model": "tdt", "diarize": True}, "--diarizer"),
             (s.port, {"model": "tdt", "diarize": True, "num_speakers": 7}, "num_speakers"),
             (s.port, {"model": "tdt", "num_speakers": 2}, "needs diarize"),
             (s.port, {"model": "tdt", "diarize": "perhaps"}, "diarize must be true or false")]
    for port, start, words in cases:
        messages = asyncio.run(live(port, start, audio))
        assert messages[-1]["type"] == "error" and words in messages[-1]["message"], (start, messages)


# ---------------------------------------------------------------------------------------------- the command


def test_serve_refuses_a_recognizer_as_diarizer():
    out = subprocess.run([sys.executable, "-m", "transcribe", "serve", "--model", str(OFFLINE), "--diarizer",
                          str(OFFLINE), "--port", "0"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "not a diarizer" in out.stderr and out.stderr.count("\n") == 1, out.stderr


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = open(tmp_path_factory.mktemp("serve") / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "transcribe", "serve", "--model", str(OFFLINE), "--model", str(EOU),
                             "--diarizer", str(SORTFORMER), "--port", str(port), "--log-level", "warning"],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, log.seek(0) or log.read()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                break
        except OSError:
            time.sleep(0.2)
    yield port
    proc.terminate()
    proc.wait(20)
    log.close()


def test_real_sortformer_over_http(real, offline):
    """mix0 (two speakers): the server's diarized_json and verbose_json are the library's
    `transcribe(diarize=True, diarizer=...)` of the same audio."""
    sortformer = transcribe.load_model(str(SORTFORMER))
    pcm = load_audio(MIX0, sample_rate=16000)
    t = offline.transcribe(pcm, diarize=True, diarizer=sortformer)
    assert t.speakers and {w.speaker for w in t.words} >= {"speaker_0", "speaker_1"}

    def post(fields):
        body, headers = multipart({"model": OFFLINE.name, **fields}, {"file": ("mix0.wav", MIX0.read_bytes())})
        conn = http.client.HTTPConnection("127.0.0.1", real, timeout=300)
        conn.request("POST", "/v1/audio/transcriptions", body, headers)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()

    body = ok(post({"response_format": "diarized_json"}))
    assert [(s["text"], s["speaker"]) for s in body["segments"]] == [(s.text, s.speaker) for s in t.segments]
    # requests at once (run as one batch when they meet: one model call, one diarizer call): the same answers
    answers = [None] * 3

    def one(i):
        answers[i] = ok(post({"response_format": "diarized_json"}))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert answers == [body] * 3
    verbose = ok(post({"response_format": "verbose_json", "diarize": "true", "timestamp_granularities[]": "word"}))
    assert verbose["speakers"] == [{"speaker": x.speaker, "start": round(x.start, 3), "end": round(x.end, 3)}
                                   for x in t.speakers]
    assert [w["speaker"] for w in verbose["words"]] == [w.speaker for w in t.words]
    assert "at most 4" in error(post({"diarize": "true", "num_speakers": "5"}), "num_speakers")


def test_real_sortformer_live(real):
    """A cache-aware model's live session with the streaming Sortformer: every word gets its speaker,
    and the final turns are the streaming diarizer's on the same audio."""
    messages = asyncio.run(live(real, {"model": EOU.name, "diarize": True}, pcm16(MIX0)))
    words = labelled(messages)
    final = messages[-1]
    assert words and final["type"] == "final" and final["speakers"]
    from transcribe.results import SpeakerTurn

    turns = [SpeakerTurn(**t) for t in final["speakers"]]
    assert [w["speaker"] for w in words] == [speaker_at(turns, w["start"], w["end"]) for w in words]
