"""Input edges a new user hit (issue 26): a hub GGUF id offline, a truncated audio file, a container
piped to `--stream -`. Each test fails on the code before its fix."""
from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from transcribe import cli, stream_cli
from transcribe.audio import load_audio
from transcribe.errors import AudioError

from .conftest import AUDIO, REPO, TINY

JFK = AUDIO / "jfk.wav"
FIT = TINY / "tiny-tdt-fit.nemo"  # fitted to jfk.wav: its text on jfk is the clip's text
JFK_TEXT = "and so my fellow americans ask not what your country can do for you ask what you can do for your country"


def _run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------------- 7: hub offline


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _offline_env(tmp_path) -> dict:
    """A hub that refuses connections and an empty Hugging Face cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HUB_OFFLINE="0")
    return env


@pytest.mark.parametrize("name", ["someone/parakeet-gguf:tiny-q8_0.gguf", "someone/parakeet"])
def test_a_hub_id_offline_fails_in_one_line_without_retries(tmp_path, name):
    """Both hub forms: one request, exit 2, one line saying not cached and hub unreachable. (The
    one-file form used to retry five times over 23 s, printing each retry.)"""
    r = subprocess.run([sys.executable, "-m", "transcribe", str(JFK), "--model", name], cwd=REPO,
                       env=_offline_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert "Retry" not in r.stderr and "retry" not in r.stderr.lower()
    assert lines[0].startswith("transcribe: error: ")
    assert "not in the Hugging Face cache" in lines[0] and "the hub is unreachable" in lines[0]


def test_load_model_of_a_hub_gguf_offline_raises_without_retries(tmp_path):
    code = ("import transcribe\n"
            "try:\n"
            "    transcribe.load_model('someone/parakeet-gguf:tiny-q8_0.gguf')\n"
            "except transcribe.TranscribeError as e:\n"
            "    print(type(e).__name__, e)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_offline_env(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no retry lines from the hub client
    assert r.stdout.startswith("ModelError someone/parakeet-gguf's tiny-q8_0.gguf is not in the Hugging Face "
                               "cache and the hub is unreachable")


# ---------------------------------------------------------------------------------------------- 8: truncated files


@pytest.fixture(scope="module")
def clip():
    x, rate = sf.read(JFK, dtype="float32")
    return x, rate


def _encoded(x, rate, fmt, subtype=None) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def _webm(x, rate) -> bytes:
    av = pytest.importorskip("av")
    buf = io.BytesIO()
    try:
        with av.open(buf, "w", format="webm") as c:
            s = c.add_stream("libopus", rate=48000)
            s.layout = "mono"
            frame = av.AudioFrame.from_ndarray((x[None] * 32767).astype(np.int16), format="s16", layout="mono")
            frame.sample_rate = rate
            for p in [*s.encode(frame), *s.encode(None)]:
                c.mux(p)
    except (av.FFmpegError, ValueError) as e:
        pytest.skip(f"no Opus encoder in this PyAV: {e}")
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["WAV", "WAV-float", "AIFF", "AU", "FLAC", "MP3", "WEBM"])
def test_a_truncated_file_is_refused_naming_what_is_missing(clip, tmp_path, fmt):
    x, rate = clip
    if fmt == "WEBM":
        data = _webm(x, rate)
    elif fmt == "MP3":
        if "MP3" not in sf.available_formats():
            pytest.skip("this libsndfile writes no MP3")
        data = _encoded(x, rate, "MP3")
    else:
        data = _encoded(x, rate, fmt.split("-")[0], "FLOAT" if fmt == "WAV-float" else None)
    whole = load_audio(data)
    assert abs(len(whole) - len(x)) < 0.05 * rate  # the whole file decodes
    p = tmp_path / f"cut.{fmt.lower()}"
    p.write_bytes(data[:len(data) // 8])  # these decoders read what is left without an error
    with pytest.raises(AudioError) as e:
        load_audio(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: truncated")
    assert "promises 11.0" in msg  # jfk.wav is 11.00 s
    held = float(msg.split("holds ")[1].split(" s")[0])
    assert 0.3 < held < 2.5


def test_a_flac_cut_mid_frame_is_called_truncated(clip):
    x, rate = clip
    data = _encoded(x, rate, "FLAC")
    with pytest.raises(AudioError, match=r"^<bytes>: truncated.*FLAC header promises 11\.00 s"):
        load_audio(data[:len(data) // 2])


@pytest.mark.parametrize("size", [0, 0xFFFFFFFF, 0x7FFFF000, 0x7FFFFFFF])
def test_a_wav_with_a_pipes_placeholder_size_is_read_whole(clip, size):
    """A recorder writing to a pipe cannot go back to write the data size: 0, 0xFFFFFFFF (ffmpeg),
    0x7FFFF000 (sox) or 0x7FFFFFFF (arecord) stand there, and the audio runs to the end."""
    x, rate = clip
    data = bytearray(_encoded(x, rate, "WAV", "PCM_16"))
    at = data.index(b"data")
    data[at + 4:at + 8] = size.to_bytes(4, "little")
    data[4:8] = (0xFFFFFFFF if size == 0xFFFFFFFF else 0).to_bytes(4, "little")
    got = load_audio(bytes(data))
    assert np.array_equal(got, load_audio(JFK))
    assert np.array_equal(load_audio(bytes(data[:len(data) // 2])), got[:(len(data) // 2 - at - 8) // 2])


def test_a_wav_with_a_chunk_after_its_data_is_whole(clip):
    x, rate = clip
    data = _encoded(x, rate, "WAV", "PCM_16") + b"LIST" + (4).to_bytes(4, "little") + b"INFO"
    assert np.array_equal(load_audio(data), load_audio(JFK))


def test_the_command_refuses_a_truncated_wav_in_one_line(capsys, tmp_path):
    cut = tmp_path / "cut.wav"
    cut.write_bytes(JFK.read_bytes()[:20000])  # the header says 352 KB
    code, out, err = _run(capsys, cut, "--model", FIT)
    assert code == 2 and out == ""
    assert err.splitlines() == [f"transcribe: error: {cut}: truncated: its WAV header promises 11.00 s of audio, "
                                "the file holds 0.62 s (10.38 s missing)"]
    code, out, err = _run(capsys, "--stream", cut, "--model", FIT)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "truncated" in err


def test_the_server_answers_400_to_a_truncated_wav(tmp_path):
    from .test_server import Server, _error, multipart

    server = Server(["--model", str(FIT)], tmp_path)
    try:
        data = JFK.read_bytes()
        body, headers = multipart({"model": "m"}, {"file": ("cut.wav", data[:20000])})
        status, _, answer = server.request("POST", "/v1/audio/transcriptions", body, headers)
        assert status == 400, answer
        err = _error((status, None, answer))
        assert err["param"] == "file"
        assert "cut.wav: truncated: its WAV header promises 11.00 s of audio, the file holds 0.62 s" in err["message"]
        body, headers = multipart({"model": "m"}, {"file": ("jfk.wav", data)})
        status, _, answer = server.request("POST", "/v1/audio/transcriptions", body, headers)
        assert status == 200 and json.loads(answer)["text"] == JFK_TEXT
    finally:
        server.stop()
