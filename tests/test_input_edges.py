"""Input edges a new user hit (issue 26): a hub GGUF id offline, a truncated audio file, a container
piped to `--stream -`. Each test fails on the code before its fix."""
from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys

import av
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


# ---------------------------------------------------------------------------------------------- 9: containers on stdin


class _Stdin:
    """A binary stdin whose reads return at most `size` bytes."""

    def __init__(self, data: bytes, size: int = 3200):
        self.data, self.size = data, size

    def read1(self, n):
        out, self.data = self.data[:min(n, self.size)], self.data[min(n, self.size):]
        return out


@pytest.fixture(scope="module")
def file_text():
    """What `--stream jfk.wav` prints."""
    r = subprocess.run([sys.executable, "-m", "transcribe", "--stream", str(JFK), "--model", str(FIT)],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout == JFK_TEXT + "\n"
    return r.stdout


def test_flac_piped_to_stream_is_decoded_not_read_as_pcm(clip, tmp_path, file_text):
    x, rate = clip
    flac = tmp_path / "jfk.flac"
    sf.write(flac, x, rate)
    with open(flac, "rb") as f:
        r = subprocess.run([sys.executable, "-m", "transcribe", "--stream", "-", "--model", str(FIT)],
                           cwd=REPO, stdin=f, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert r.stdout == file_text


@pytest.mark.parametrize("fmt", ["OGG", "AIFF", "MP3", "MP3-bare", "WEBM", "M4A"])
def test_other_containers_on_stdin_give_the_files_text(capsys, monkeypatch, clip, tmp_path, fmt):
    """As the same bytes given as a file: `--stream FILE` and `--stream -` print the same text."""
    x, rate = clip
    if fmt == "WEBM":
        data = _webm(x, rate)
    elif fmt == "M4A":
        buf = io.BytesIO()
        with av.open(buf, "w", format="mp4") as c:
            s = c.add_stream("aac", rate=rate)
            s.layout = "mono"
            frame = av.AudioFrame.from_ndarray((x[None] * 32767).astype(np.int16), format="s16", layout="mono")
            frame.sample_rate = rate
            for p in [*s.encode(frame), *s.encode(None)]:
                c.mux(p)
        data = buf.getvalue()
    elif fmt.startswith("MP3"):
        if "MP3" not in sf.available_formats():
            pytest.skip("this libsndfile writes no MP3")
        data = _encoded(x, rate, "MP3")
        assert data[0] == 0xFF and data[1] & 0xE0 == 0xE0  # frames from the first byte, as lame writes to a pipe
        if fmt == "MP3":  # an ID3v2.3 tag first (a title), as ffmpeg writes
            title = b"TIT2" + (4).to_bytes(4, "big") + b"\x00\x00" + b"\x00jfk"
            data = b"ID3\x03\x00\x00" + len(title).to_bytes(4, "big") + title + data
    else:
        data = _encoded(x, rate, fmt)
    path = tmp_path / f"jfk.{fmt.lower()}"
    path.write_bytes(data)
    code, want, err = _run(capsys, "--stream", path, "--model", FIT)
    assert code == 0 and err == "" and want.strip()
    monkeypatch.setattr(stream_cli, "_stdin", lambda: _Stdin(data, 3000))
    code, out, err = _run(capsys, "--stream", "-", "--model", FIT)
    assert code == 0 and err == ""
    assert out == want
    if fmt in ("OGG", "AIFF"):  # lossless or near: the clip's text
        assert out == JFK_TEXT + "\n"


def test_pcm_whose_first_sample_looks_like_a_frame_sync_stays_pcm():
    """Bare MP3 or AAC is told by three frame headers in a row; PCM starting with -1 or -5 stays PCM."""
    def sniff(data):
        return stream_cli._sniff(data[:12], _Stdin(data[12:]).read1)[1]

    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(16000) * 300).astype("<i2").tobytes()
    for first in (b"\xff\xff", b"\xfb\xff", b"\xff\xfb\x90\x64", b"\xff\xf1\x50\x80"):
        assert sniff(first + noise) is None
    assert sniff(b"fLaC" + noise) == "FLAC" and sniff(b"\x00\x00\x00\x20ftypM4A " + noise) == "MP4"


def test_a_wav_on_stdin_ends_at_its_data_and_a_short_one_is_an_error(capsys, monkeypatch, clip):
    x, rate = clip
    wav = _encoded(x, rate, "WAV", "PCM_16")
    tail = b"LIST" + (400).to_bytes(4, "little") + bytes(range(256)) * 1 + bytes(144)
    monkeypatch.setattr(stream_cli, "_stdin", lambda: _Stdin(wav + tail))
    code, out, err = _run(capsys, "--stream", "-", "--model", FIT)
    assert code == 0 and err == "" and out == JFK_TEXT + "\n"  # the LIST chunk is not audio
    monkeypatch.setattr(stream_cli, "_stdin", lambda: _Stdin(wav[:len(wav) // 2]))
    code, out, err = _run(capsys, "--stream", "-", "--model", FIT)
    assert code == 2
    assert err.splitlines() == ["transcribe: error: <stdin>: truncated: its WAV header promises 11.00 s of audio, "
                                "the input ended after 5.50 s"]
