"""The `transcribe` command end to end, as a subprocess, with a real tiny .nemo model."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import AUDIO, REPO, TINY

MODEL = str(TINY / "tiny-tdt-fit.nemo")


def run(*args, env=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "transcribe", *args], capture_output=True, text=True, cwd=REPO, env=e, timeout=300)


def test_json_document_for_jfk():
    out = run(str(AUDIO / "jfk.wav"), "--model", MODEL, "--format", "json")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert list(doc) == ["text", "language", "duration", "model", "segments", "words", "tokens", "nbest",
                         "speakers", "tags"]
    assert doc["language"] is None and doc["model"] == "tiny-tdt-fit.nemo"
    assert doc["text"] == "and so my fellow americans ask not what your country can do for you ask what you can do for your country"
    assert [w["word"] for w in doc["words"]] == doc["text"].split()
    # The word times NeMo gives for the same model and clip.
    ref = json.loads((REPO / "tests" / "references" / "nemo" / "tiny-tdt-fit.json").read_text())
    nemo = ref["per_audio"]["jfk"]["decoding"]["tdt"]["greedy_batch"]
    assert doc["text"] == nemo["text"]
    want = nemo["timestamps"]["word"]
    assert [w["word"] for w in doc["words"]] == [w["word"] for w in want]
    for got, w in zip(doc["words"], want):
        assert got["start"] == pytest.approx(w["start"], abs=1e-6)
        assert got["end"] == pytest.approx(w["end"], abs=1e-6)


def _bad_inputs(tmp_path):
    empty = tmp_path / "empty.wav"
    import numpy as np
    import soundfile as sf

    sf.write(empty, np.zeros(0, dtype="float32"), 16000)
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt " + os.urandom(200))
    text = tmp_path / "notes.wav"
    text.write_text("this is a text file, not audio\n" * 20)
    return {"missing": str(tmp_path / "missing.wav"), "corrupt": str(corrupt), "empty": str(empty), "text": str(text)}


@pytest.mark.parametrize("kind", ["missing", "corrupt", "empty", "text"])
def test_bad_audio_one_line_exit_2(tmp_path, kind):
    path = _bad_inputs(tmp_path)[kind]
    out = run(path, "--model", MODEL)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("transcribe: error: ") and path in lines[0], out.stderr
    assert "Traceback" not in out.stderr


def test_corrupt_nemo_one_line_exit_2(tmp_path):
    bad = tmp_path / "broken.nemo"
    bad.write_bytes(os.urandom(4096))
    out = run(str(AUDIO / "jfk.wav"), "--model", str(bad))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a .nemo archive" in lines[0], out.stderr


def test_unknown_model_id_offline_one_line_exit_2(tmp_path):
    out = run(str(AUDIO / "jfk.wav"), "--model", "nobody/no-such-model", env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)})
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown model 'nobody/no-such-model'" in lines[0], out.stderr


def test_default_model_is_whisper_tiny_en():
    """No --model: the Whisper tiny.en weights installed with the package, offline."""
    out = run(str(AUDIO / "jfk.wav"), env={"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "And so my fellow Americans ask not what your country can do for you ask what you can do for your country"


def test_beam_size_option_reaches_whisper():
    out = run(str(AUDIO / "jfk.wav"), "--beam-size", "5", env={"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    ref = json.loads((REPO / "tests" / "references" / "whisper" / "decode.json").read_text())
    # One window: long-form transcribe() of an 11 s clip differs from decode() on the padded mel
    # only in the window's padding, and beam 5 gives the comma greedy leaves out.
    assert out.stdout.startswith("And so, my fellow Americans")
    assert ref["clips"]["jfk.wav"]["beam"]["beam5"]["text"].startswith("And so, my fellow Americans")


def test_batched_option_reaches_whisper(tmp_path):
    """--batched: the windows cut at pauses and decoded together; on an 11 s clip one window, the
    same words as the sequential loop."""
    out = run(str(AUDIO / "jfk.wav"), "--batched", "--format", "json", env={"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["text"].lower().startswith("and so my fellow americans")
    assert all(0 <= s["start"] <= s["end"] <= doc["duration"] + 0.02 for s in doc["segments"])
    stream = run("--stream", str(AUDIO / "jfk.wav"), "--batched", env={"HF_HUB_OFFLINE": "1"})
    assert stream.returncode == 2 and "--batched does not apply to --stream" in stream.stderr


def test_whisper_options_refused_by_parakeet():
    """One usage error, before any audio is read, naming the options and not the audio file."""
    out = run(str(AUDIO / "no-such-file.wav"), "--model", MODEL, "--patience", "2", "--language", "de")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "transcribe: error: tiny-tdt-fit.nemo is a Parakeet model and does not take --language or --patience"]


def test_head_refused_by_whisper():
    out = run(str(AUDIO / "no-such-file.wav"), "--head", "ctc", env={"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "transcribe: error: tiny.en is a Whisper model and does not take --head"]


def test_word_timestamps_option_gives_openai_whisper_words():
    """--word-timestamps with the default model: the JSON words are openai-whisper's (0.02 s)."""
    out = run(str(AUDIO / "jfk.wav"), "--word-timestamps", "--temperature", "0", "--format", "json",
              env={"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    ref = json.loads((REPO / "tests" / "references" / "whisper" / "words.json").read_text())
    want = [w for s in ref["clips"]["jfk.wav"]["segments"] for w in s["words"]]
    assert [w["word"] for w in doc["words"]] == [w["word"].strip() for w in want]
    for got, w in zip(doc["words"], want):
        assert got["start"] == pytest.approx(w["start"], abs=0.02)
        assert got["end"] == pytest.approx(w["end"], abs=0.02)
    assert [s["words"] for s in doc["segments"]] and all(s["temperature"] == 0.0 for s in doc["segments"])


@pytest.mark.parametrize("value", ["hot", "-1", "0.2,x"])
def test_bad_temperature_is_a_usage_error(value):
    out = run(str(AUDIO / "jfk.wav"), "--temperature", value, env={"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 2
    assert "temperature" in out.stderr


def test_word_timestamps_accepted_by_parakeet():
    out = run(str(AUDIO / "jfk.wav"), "--model", MODEL, "--word-timestamps", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["words"]


def test_json_has_the_same_keys_for_whisper_and_parakeet():
    """One schema: the document, its segments, words and tokens have the same keys whatever the model."""
    docs = {}
    for name, args in (("parakeet", ["--model", MODEL]), ("whisper", ["--word-timestamps"])):
        out = run(str(AUDIO / "jfk.wav"), "--format", "json", *args, env={"HF_HUB_OFFLINE": "1"})
        assert out.returncode == 0, out.stderr
        docs[name] = json.loads(out.stdout)
    p, w = docs["parakeet"], docs["whisper"]
    assert list(p) == list(w) == ["text", "language", "duration", "model", "segments", "words", "tokens", "nbest",
                                  "speakers", "tags"]
    for key in ("segments", "words", "tokens"):
        assert p[key] and w[key]
        assert {tuple(x) for x in p[key]} == {tuple(x) for x in w[key]} == {tuple(p[key][0])}
    assert (p["language"], w["language"]) == (None, "en")
    assert (p["model"], w["model"]) == ("tiny-tdt-fit.nemo", "tiny.en")
    for d in (p, w):
        assert d["text"] == d["text"].strip() and d["text"]
        # a token's text is its decoded text (a word's first token with its space), its piece the raw entry
        assert "".join(t["text"] for t in d["tokens"]).strip() == d["text"]
    assert any(t["piece"].startswith("\u2581") for t in p["tokens"]) and not any(t["text"].startswith("\u2581") for t in p["tokens"])
    assert any(t["piece"].startswith("\u0120") for t in w["tokens"]) and any(t["text"].startswith(" ") for t in w["tokens"])
