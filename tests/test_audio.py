"""load_audio: every container, every kind of source, resampling, mixing, and each error."""
import io
import sys
import types

import av
import numpy as np
import pytest
import soundfile as sf
import torch

from transcribe.audio import load_audio
from transcribe.errors import AudioError, TranscribeError

SR = 16000
SECONDS = 2.0


def tone(freq, seconds=SECONDS, sr=SR, amp=0.5):
    t = np.arange(int(round(seconds * sr))) / sr
    # A fade-in gives cross-correlation one clear peak.
    return (amp * np.sin(2 * np.pi * freq * t) * np.minimum(1.0, t / 0.5)).astype(np.float32)


def signal(sr=SR, seconds=SECONDS):
    return (tone(440, seconds, sr, 0.4) + tone(1000, seconds, sr, 0.2)).astype(np.float32)


def encode(path, x, sr, container, codec):
    """Write mono float32 samples `x` with PyAV (the test's own encoder, not the code under test)."""
    with av.open(str(path), "w", format=container) as out:
        stream = out.add_stream(codec, rate=sr, layout="mono")
        for i in range(0, len(x), 4096):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(x[None, i:i + 4096]),
                                               format="fltp", layout="mono")
            frame.sample_rate = sr
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def dominant_freq(x, sr):
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return np.fft.rfftfreq(len(x), 1 / sr)[spec.argmax()]


def aligned_corr(ref, y, max_lag=2000):
    """Correlation of y with ref after the best shift within max_lag samples (codec delays)."""
    n = 1 << int(np.ceil(np.log2(len(ref) + len(y))))
    xc = np.fft.irfft(np.fft.rfft(y, n) * np.conj(np.fft.rfft(ref, n)), n)
    lags = np.r_[0:max_lag + 1, -max_lag:0]
    lag = int(lags[np.argmax(xc[lags])])
    a = ref[max(0, -lag):]
    b = y[max(0, lag):]
    m = min(len(a), len(b))
    return float(np.corrcoef(a[:m], b[:m])[0, 1])


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("media")
    x = signal()
    sf.write(d / "a.wav", x, SR, subtype="PCM_16")
    encode(d / "a.flac", x, SR, "flac", "flac")
    encode(d / "a.ogg", x, SR, "ogg", "libopus")
    encode(d / "a.mp3", x, SR, "mp3", "libmp3lame")
    encode(d / "a.m4a", x, SR, "mp4", "aac")
    encode(d / "a.webm", x, SR, "webm", "libopus")
    return d, x


# Lossy codecs pad or trim a few codec frames at the ends.
@pytest.mark.parametrize("ext,tol_s,min_corr", [
    ("wav", 0.0, 0.9999),
    ("flac", 0.0, 0.9999),
    ("ogg", 0.03, 0.99),
    ("mp3", 0.08, 0.99),
    ("m4a", 0.15, 0.99),
    ("webm", 0.03, 0.99),
])
def test_containers_decode_to_the_same_audio(media, ext, tol_s, min_corr):
    d, x = media
    y = load_audio(d / f"a.{ext}")
    assert y.dtype == np.float32 and y.ndim == 1
    assert abs(len(y) - len(x)) <= tol_s * SR, (len(y), len(x))
    assert aligned_corr(x, y) >= min_corr
    assert abs(np.sqrt(np.mean(y ** 2)) - np.sqrt(np.mean(x ** 2))) < 0.02


def test_wav_is_exact_and_path_may_be_str(media):
    d, x = media
    y = load_audio(str(d / "a.wav"))
    np.testing.assert_allclose(y, x, atol=1 / 32768 + 1e-6)


def test_stereo_is_mixed_to_mono_by_mean(tmp_path):
    left, right = tone(440, amp=0.6), tone(440, amp=0.2)
    sf.write(tmp_path / "s.wav", np.stack([left, right], axis=1), SR, subtype="FLOAT")
    y = load_audio(tmp_path / "s.wav")
    np.testing.assert_allclose(y, (left + right) / 2, atol=1e-6)
    # Opposite channels cancel.
    sf.write(tmp_path / "c.wav", np.stack([left, -left], axis=1), SR, subtype="FLOAT")
    assert np.abs(load_audio(tmp_path / "c.wav")).max() < 1e-6


def test_stereo_through_pyav(tmp_path):
    x = tone(440, amp=0.5)
    path = tmp_path / "s.mp3"
    with av.open(str(path), "w", format="mp3") as out:
        stream = out.add_stream("libmp3lame", rate=SR, layout="stereo")
        st = np.stack([x, np.zeros_like(x)])
        for i in range(0, len(x), 4096):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(st[:, i:i + 4096]),
                                               format="fltp", layout="stereo")
            frame.sample_rate = SR
            for p in stream.encode(frame):
                out.mux(p)
        for p in stream.encode(None):
            out.mux(p)
    y = load_audio(path)
    rms = np.sqrt(np.mean(y[SR // 2:] ** 2))
    assert abs(rms - 0.25 / np.sqrt(2)) < 0.01  # half the amplitude: the mean of x and silence


@pytest.mark.parametrize("src_rate", [44100, 8000, 48000, 22050])
def test_resampling_to_16k_keeps_length_and_pitch(tmp_path, src_rate):
    x = tone(1000, sr=src_rate, amp=0.5)
    sf.write(tmp_path / "r.wav", x, src_rate, subtype="FLOAT")
    y = load_audio(tmp_path / "r.wav", sample_rate=SR)
    assert abs(len(y) - SECONDS * SR) <= 1
    assert abs(dominant_freq(y, SR) - 1000) < 2
    assert abs(np.abs(y[SR:]).max() - 0.5) < 0.01


def test_other_target_rate(media):
    d, x = media
    y = load_audio(d / "a.flac", sample_rate=24000)
    assert len(y) == int(SECONDS * 24000)
    assert abs(dominant_freq(y, 24000) - 440) < 2


def test_bytes_and_file_objects(media):
    d, x = media
    data = (d / "a.wav").read_bytes()
    ref = load_audio(d / "a.wav")
    for src in (data, bytearray(data), memoryview(data), io.BytesIO(data)):
        np.testing.assert_array_equal(load_audio(src), ref)
    with open(d / "a.mp3", "rb") as f:
        np.testing.assert_array_equal(load_audio(f), load_audio(d / "a.mp3"))
    mp3 = (d / "a.mp3").read_bytes()
    np.testing.assert_array_equal(load_audio(mp3), load_audio(d / "a.mp3"))


class _Pipe(io.RawIOBase):
    """A readable, non-seekable stream, like a pipe."""

    def __init__(self, data):
        self._buf = io.BytesIO(data)

    def readable(self):
        return True

    def seekable(self):
        return False

    def readinto(self, b):
        chunk = self._buf.read(len(b))
        b[:len(chunk)] = chunk
        return len(chunk)


def test_non_seekable_stream_and_stdin(media, monkeypatch):
    d, x = media
    data = (d / "a.flac").read_bytes()
    ref = load_audio(d / "a.flac")
    np.testing.assert_array_equal(load_audio(io.BufferedReader(_Pipe(data))), ref)
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BufferedReader(_Pipe(data))))
    np.testing.assert_array_equal(load_audio("-"), ref)


def test_numpy_arrays():
    x = tone(440)
    np.testing.assert_array_equal(load_audio(x, source_rate=SR), x)
    i16 = (x * 32767).astype(np.int16)
    np.testing.assert_allclose(load_audio(i16, source_rate=SR), x, atol=1e-4)
    i32 = (x.astype(np.float64) * 2**31).astype(np.int32)
    np.testing.assert_allclose(load_audio(i32, source_rate=SR), x, atol=1e-6)
    np.testing.assert_allclose(load_audio(x.astype(np.float64), source_rate=SR), x)
    # [samples, channels] and [channels, samples] give the same mono mean.
    st = np.stack([x, np.zeros_like(x)])
    np.testing.assert_allclose(load_audio(st, source_rate=SR), x / 2, atol=1e-7)
    np.testing.assert_allclose(load_audio(st.T, source_rate=SR), x / 2, atol=1e-7)
    np.testing.assert_allclose(load_audio(x[None, :], source_rate=SR), x)
    # Resampled when the rate differs.
    y = load_audio(tone(440, sr=8000), source_rate=8000)
    assert len(y) == int(SECONDS * SR)


def test_torch_tensors():
    x = tone(440)
    np.testing.assert_array_equal(load_audio(torch.from_numpy(x), source_rate=SR), x)
    np.testing.assert_allclose(load_audio(torch.from_numpy(x).to(torch.bfloat16), source_rate=SR), x, atol=4e-3)
    np.testing.assert_allclose(load_audio(torch.from_numpy(x * 32767).to(torch.int16), source_rate=SR), x, atol=1e-4)
    st = torch.stack([torch.from_numpy(x)] * 2)  # [channels, samples]
    np.testing.assert_allclose(load_audio(st, source_rate=SR), x, atol=1e-7)
    y = load_audio(torch.from_numpy(tone(440, sr=44100)), source_rate=44100)
    assert abs(len(y) - SECONDS * SR) <= 1


def test_silence_is_valid(tmp_path):
    sf.write(tmp_path / "quiet.wav", np.zeros(SR, np.int16), SR)
    y = load_audio(tmp_path / "quiet.wav")
    assert len(y) == SR and not y.any()
    assert not load_audio(np.zeros(800, np.float32), source_rate=8000).any()


# ----------------------------------------------------------------------------------- errors


def _err(source, **kw):
    with pytest.raises(AudioError) as e:
        load_audio(source, **kw)
    msg = str(e.value)
    assert "\n" not in msg and msg
    assert isinstance(e.value, TranscribeError)
    return msg


def test_missing_file(tmp_path):
    p = tmp_path / "nope.wav"
    msg = _err(p)
    assert str(p) in msg and "no such file" in msg


def test_directory(tmp_path):
    msg = _err(tmp_path)
    assert str(tmp_path) in msg and "directory" in msg


def test_wav_with_zero_samples(tmp_path):
    p = tmp_path / "empty.wav"
    sf.write(p, np.zeros(0, np.float32), SR)
    msg = _err(p)
    assert str(p) in msg and "no audio samples" in msg


def test_zero_byte_file(tmp_path):
    p = tmp_path / "zero.wav"
    p.write_bytes(b"")
    assert "empty" in _err(p)
    assert "empty" in _err(b"")


def test_text_file_named_wav(tmp_path):
    p = tmp_path / "notes.wav"
    p.write_text("This is not audio.\nJust some words, really.\n")
    msg = _err(p)
    assert str(p) in msg and "text file" in msg


@pytest.mark.parametrize("name", ["junk.wav", "junk.mp3", "junk.bin"])
def test_corrupt_data(tmp_path, name):
    rng = np.random.default_rng(0)
    p = tmp_path / name
    p.write_bytes(bytes(rng.integers(0, 256, 4000, dtype=np.uint8)))
    msg = _err(p)
    assert str(p) in msg and "not a readable audio file" in msg


def test_corrupt_bytes_and_truncated_header(media):
    d, _ = media
    assert _err(b"\x00\x01garbage\xff" * 100).startswith("<bytes>: ")
    msg = _err((d / "a.wav").read_bytes()[:30])
    assert "not a readable audio file" in msg


def test_non_finite_samples(tmp_path):
    x = tone(440)
    x[100] = np.nan
    assert "NaN or infinite" in _err(x, source_rate=SR)
    x[100] = np.inf
    sf.write(tmp_path / "inf.wav", x, SR, subtype="FLOAT")
    msg = _err(tmp_path / "inf.wav")
    assert "inf.wav" in msg and "NaN or infinite" in msg


def test_bad_array_arguments():
    x = tone(440)
    assert "source_rate" in _err(x)
    assert "source_rate" in _err(x, source_rate=0)
    assert "shape" in _err(np.zeros((2, 3, 100), np.float32), source_rate=SR)
    assert "no audio samples" in _err(np.zeros(0, np.float32), source_rate=SR)
    assert "int16" in _err(np.zeros(10, np.int64), source_rate=SR)
    assert "source_rate" in _err(b"RIFF", source_rate=SR)
    assert "cannot read audio from" in _err(12345)


def test_committed_sample():
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "samples" / "sample.wav"
    info = sf.info(str(path))
    assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
    y = load_audio(path)
    assert 3.0 <= len(y) / SR <= 6.0
    assert 0.5 < np.abs(y).max() <= 1.0
