"""The audio-LLM families (Granite Speech, Qwen3-ASR, Voxtral, Voxtral Realtime, Canary-Qwen) on every surface,
with their committed tiny models: the OpenAI-compatible server gives what the library gives, a batch job writes it,
the WebSocket streams an utterance session. Each family's parity with transformers is in its own test file."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import transcribe

from .conftest import AUDIO

openai = pytest.importorskip("openai", reason="the server tests need the test extra: pip install -e '.[test]'")
pytest.importorskip("fastapi", reason="the server tests need the test extra")
uvicorn = pytest.importorskip("uvicorn", reason="the server tests need the test extra")

HERE = Path(__file__).parent
JFK = AUDIO / "jfk.wav"
MODELS = {"granite_speech": HERE / "models" / "granite_speech" / "g40",
          "qwen3_asr": HERE / "models" / "qwen3_asr" / "tiny",
          "voxtral": HERE / "models" / "voxtral" / "tiny",
          "voxtral_realtime": HERE / "models" / "voxtral_realtime" / "tiny",
          "canary_qwen": HERE / "models" / "canary_qwen" / "tiny"}
PRESENT = list(MODELS)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=PRESENT)
def model(request):
    return transcribe.load_model(str(MODELS[request.param]))


def test_the_server_gives_what_the_library_gives(model):
    from transcribe.server import Engine, create_app

    app = create_app(Engine({"m": model}))
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
            r = client.audio.transcriptions.create(model="m", file=f, response_format="verbose_json")
        expected = model.transcribe(str(JFK))
        assert r.text == expected.text and r.text
        assert r.duration == pytest.approx(expected.duration)
        if model.family == "voxtral":  # speech translation: /v1/audio/translations (into English by default)
            with open(JFK, "rb") as f:
                r = client.audio.translations.create(model="m", file=f)
            assert r.text == model.transcribe(str(JFK), task="translate").text and r.text
        with open(JFK, "rb") as f:  # another family's option: 400, named
            with pytest.raises(openai.BadRequestError):
                client.audio.transcriptions.create(model="m", file=f, extra_body={"hotwords": "a"})
    finally:
        server.should_exit = True
        thread.join(30)


def test_a_batch_job_writes_the_library_s_transcript(model, tmp_path):
    from transcribe.cli import main

    out = tmp_path / "out"
    assert main(["batch", str(JFK), "--model", str(MODELS[model.family]), "--output-dir", str(out),
                 "--format", "json", "-q"]) == 0
    [written] = list(out.rglob("*.json"))
    doc = json.loads(written.read_text())
    assert doc["text"] == model.transcribe(str(JFK)).text
