"""Hostile audio (issue 36, items 4 and 11): files and arrays that decode to hours of audio, absurd sample
rates, and finite but huge samples are refused with a clear AudioError (an AudioLimitError) before the
memory or the time they would take, and before any model work.

The resource cases run in a subprocess under a memory limit (RLIMIT_AS) and a time limit (the
subprocess's timeout), as the issue asks: without the limits in transcribe.audio each of them passes
the memory limit (a MemoryError, or the process killed) or decodes hours of audio."""
import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import transcribe
from transcribe import audio
from transcribe.audio import AudioLimitError, load_audio, model_input
from transcribe.errors import AudioError, TranscribeError

from .conftest import AUDIO, SHARED

ROOT = Path(transcribe.__file__).resolve().parent.parent

# The child's address-space limit: Python, numpy, soundfile, PyAV and soxr map about 0.5 GiB of it
# before any audio; the cases below would take 1.4 GiB (3 h decoded as blocks joined at the end: 2x
# its 0.69 GiB output) to 9 GB (1 Hz resampled x16,000) without the limits.
MEMORY = 1400 << 20
TIMEOUT = 60


def _limited(code: str, memory: int = MEMORY) -> dict:
    """Runs `code` (which sets `result`) in a fresh Python under `memory` bytes of address space; the
    outcome as {"ok": ...} or {"error": type name, "message": ...}."""
    script = (
        "import json, resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "try:\n"
        + "".join(f"    {line}\n" for line in code.strip().splitlines())
        + "    out = {'ok': result}\n"
        "except BaseException as e:\n"
        "    out = {'error': type(e).__name__, 'message': str(e)}\n"
        "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _silent_flac(path: Path, hours: float, rate: int = 8000) -> Path:
    """Hours of digital silence as FLAC: a few hundred KB (FLAC codes a silent block in a few bytes)."""
    block = np.zeros(1 << 20, np.int16)
    left = int(hours * 3600 * rate)
    with sf.SoundFile(path, "w", samplerate=rate, channels=1, format="FLAC", subtype="PCM_16") as f:
        while left > 0:
            f.write(block[:min(left, block.size)])
            left -= block.size
    return path


def _no_length(path: Path) -> Path:
    """The FLAC with its STREAMINFO's total sample count set to 0 (unknown, as a pipe's writer leaves it)."""
    data = bytearray(path.read_bytes())
    assert data[:4] == b"fLaC"
    data[21] &= 0xF0
    data[22:26] = bytes(4)
    out = path.with_name(path.stem + "-nolength.flac")
    out.write_bytes(bytes(data))
    return out


def _wav(path: Path, rate: int, samples: bytes, bits: int = 16, tag: int = 1) -> Path:
    """A WAV written by hand, so its header may say any rate."""
    block = bits // 8
    fmt = struct.pack("<HHIIHH", tag, 1, rate, rate * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(samples)) + samples
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return path


@pytest.fixture(scope="module")
def six_hours(tmp_path_factory):
    return _silent_flac(tmp_path_factory.mktemp("hostile") / "six-hours.flac", 6)


# ---------------------------------------------------------------------------------------------
# Item 4: decoded duration and sample rates


def test_flac_bomb_refused_from_its_header(six_hours):
    assert six_hours.stat().st_size < 1 << 20  # under a server's upload limit
    out = _limited(f"from transcribe.audio import load_audio\n"
                   f"result = len(load_audio({str(six_hours)!r}, 16000, max_seconds=180 * 60))")
    assert out.get("error") == "AudioLimitError", out
    assert out["message"] == f"{six_hours}: its header declares 6.00 h of audio, over the limit of 3.00 h"


def test_flac_bomb_without_a_length_stops_while_decoding(six_hours):
    blind = _no_length(six_hours)
    assert sf.info(str(blind)).frames > 1 << 62  # libsndfile: unknown
    out = _limited(f"from transcribe.audio import load_audio\n"
                   f"result = len(load_audio({str(blind)!r}, 16000, max_seconds=60))")
    assert out.get("error") == "AudioLimitError", out
    assert out["message"] == f"{blind}: longer than the limit of 1.0 min of audio (decoding stopped there)"


def test_unbounded_decode_holds_little_more_than_its_output(tmp_path):
    """No limit (the CLI's and the API's default): 3 h of audio decodes, in memory about its output's
    0.69 GiB (float32 at 16 kHz), not twice it."""
    three = _silent_flac(tmp_path / "three-hours.flac", 3)
    out = _limited(f"from transcribe.audio import load_audio\n"
                   f"x = load_audio({str(three)!r}, 16000)\n"
                   "result = [len(x), float(x.min()), float(x.max())]")
    assert out.get("ok") == [3 * 3600 * 16000, 0.0, 0.0], out


def test_wav_at_one_hertz_is_refused_before_resampling(tmp_path):
    """32 KB of samples at 1 Hz is 4.4 h, x16,000 when resampled to 16 kHz: refused by its rate, with
    no duration limit set."""
    one_hz = _wav(tmp_path / "one-hz.wav", 1, np.arange(16000, dtype="<i2").tobytes())
    out = _limited(f"from transcribe.audio import load_audio\nresult = len(load_audio({str(one_hz)!r}, 16000))")
    assert out.get("error") == "AudioLimitError", out
    assert out["message"] == f"{one_hz}: a sample rate of 1 Hz is outside the rates accepted (1,000 to 768,000 Hz)"


@pytest.mark.parametrize("rate", [999, 768_001, 100_000_000])
def test_absurd_rates_of_files_are_refused(tmp_path, rate):
    path = _wav(tmp_path / "x.wav", rate, bytes(2000), bits=8)  # 8-bit: a byte rate that fits the header
    with pytest.raises(AudioLimitError, match=f"a sample rate of {rate:,} Hz is outside the rates accepted"):
        load_audio(path, 16000)


@pytest.mark.parametrize("rate", [1_000, 768_000])
def test_the_rates_at_the_bounds_decode(tmp_path, rate):
    path = _wav(tmp_path / "x.wav", rate, np.full(rate // 10, 1000, "<i2").tobytes())  # 0.1 s
    x = load_audio(path, 16000)
    assert len(x) == 1600


def test_compressed_container_refused_from_its_duration(tmp_path):
    """The PyAV path (an AAC in MP4): the container's duration is checked before decoding."""
    import av

    path = tmp_path / "two-minutes.m4a"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("aac", rate=16000, layout="mono")
        frame_samples = 1024
        for i in range(120 * 16000 // frame_samples):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, frame_samples), np.float32), format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 16000, i * frame_samples
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    with pytest.raises(AudioLimitError, match=r"its header declares 2\.0 min of audio, over the limit of 1\.0 min"):
        load_audio(path, 16000, max_seconds=60)
    assert abs(len(load_audio(path, 16000, max_seconds=180)) - 120 * 16000) < 16000  # under it: decodes


def test_arrays_take_the_same_limits():
    with pytest.raises(AudioLimitError, match="<array>: a sample rate of 1 Hz is outside"):
        load_audio(np.zeros(16000, np.float32), 16000, source_rate=1)
    with pytest.raises(AudioLimitError, match="<array>: a sample rate of 1,000,000,000 Hz is outside"):
        load_audio(np.zeros(16000, np.float32), 16000, source_rate=1e9)
    with pytest.raises(AudioLimitError, match=r"<array>: holds 1\.0 min of audio, over the limit of 30\.00 s"):
        load_audio(np.zeros((60 * 8000, 2), np.int16), 16000, source_rate=8000, max_seconds=30)
    with pytest.raises(AudioLimitError, match="sample_rate: a sample rate of 16,000,000 Hz is outside"):
        load_audio(np.zeros(16000, np.float32), 16_000_000, source_rate=16000)
    # the API's path: transcribe(array, sample_rate=...) gives model_input the array and its rate
    with pytest.raises(AudioLimitError, match="a sample rate of 1 Hz"):
        model_input(np.zeros(32000, np.float32), 16000, sample_rate=1)


def test_the_process_limit_applies_where_the_caller_gives_none(tmp_path):
    """A server sets it once (`transcribe serve --max-audio-minutes`, default 180); unset, no limit."""
    path = tmp_path / "two-seconds.wav"
    sf.write(path, np.zeros(32000, np.float32), 16000)
    assert len(load_audio(path, 16000)) == 32000
    try:
        audio.set_max_audio_seconds(1.5)
        with pytest.raises(AudioLimitError, match=r"declares 2\.00 s of audio, over the limit of 1\.50 s"):
            load_audio(path, 16000)
        with pytest.raises(AudioLimitError, match="holds"):
            model_input(np.zeros(32000, np.float32), 16000)  # the API with an array
        assert len(load_audio(path, 16000, max_seconds=3)) == 32000  # the caller's own limit wins
    finally:
        audio.set_max_audio_seconds(None)
    assert len(load_audio(path, 16000)) == 32000
    for bad in (0, -1, float("nan"), "60", True):
        with pytest.raises(AudioError, match="max_seconds must be a positive number"):
            load_audio(path, 16000, max_seconds=bad)


def test_server_refuses_a_flac_bomb_by_default(six_hours, tmp_path):
    """`transcribe serve` sets the limit for its uploads: --max-audio-minutes, 180 by default. The 6 h
    FLAC (under 1 MB, under any upload limit) is answered 400 from its header, before decoding."""
    from .test_server import Server, multipart

    server = Server(["--model", str(MODELS / "parakeet-tiny" / "tiny-tdt-fit.nemo")], tmp_path)
    try:
        body, headers = multipart({"model": "whisper-1"}, {"file": ("bomb.flac", six_hours.read_bytes())})
        status, _, reply = server.request("POST", "/v1/audio/transcriptions", body, headers)
        assert status == 400, reply
        assert json.loads(reply)["error"]["message"] == \
            "could not decode the audio: bomb.flac: its header declares 6.00 h of audio, over the limit of 3.00 h"
    finally:
        server.stop()
    from transcribe.server.cli import _parser

    assert _parser().parse_args(["--max-audio-minutes", "5"]).max_audio_minutes == 5.0


# ---------------------------------------------------------------------------------------------
# Item 11: finite but huge samples (and NaN / inf), refused wherever audio enters, before any model work

HUGE = [1e30, 3e38, -2e7]


@pytest.mark.parametrize("value", HUGE)
def test_huge_samples_in_a_file_are_refused(tmp_path, value):
    path = tmp_path / "huge.wav"
    x = np.zeros(16000, np.float32)
    x[8000] = value
    sf.write(path, x, 16000, subtype="FLOAT")
    with pytest.raises(AudioLimitError, match=re.escape(f"{path.name}: a sample of magnitude {abs(value):.3g} is "
                                                        "beyond the largest accepted (16,777,216): floating-point audio is "
                                                        "expected in [-1, 1]")):
        load_audio(path, 16000)


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_huge_samples_in_an_array_are_refused(value, dtype):
    x = np.zeros(16000, dtype)
    x[-1] = value
    with pytest.raises(AudioLimitError, match=re.escape(f"<array>: a sample of magnitude {abs(value):.3g} is beyond")):
        load_audio(x, 16000, source_rate=16000)
    with pytest.raises(AudioLimitError, match=re.escape("is beyond the largest accepted (16,777,216)")):
        model_input(x, 16000, sample_rate=8000)  # the API's path, resampling or not


def test_huge_samples_in_a_tensor_are_refused():
    import torch

    x = torch.zeros(2, 16000, dtype=torch.bfloat16)
    x[1, 5] = 1e30
    with pytest.raises(AudioLimitError, match="magnitude 1e\\+30 is beyond"):
        load_audio(x, 16000, source_rate=16000)


def test_the_amplitude_bound_and_what_stays_accepted():
    """Up to 2**24 decodes (float arrays holding int16 or int24 values unscaled); integer formats are in
    range."""
    x = np.zeros(1600, np.float32)
    x[3] = -(2.0 ** 24)
    assert load_audio(x, 16000, source_rate=16000)[3] == -(2.0 ** 24)
    x[3] = np.nextafter(np.float32(2 ** 24), np.float32(np.inf))
    with pytest.raises(AudioLimitError):
        load_audio(x, 16000, source_rate=16000)
    full = np.array([-32768, 32767] * 800, np.int16)
    assert np.abs(load_audio(full, 16000, source_rate=16000)).max() == 1.0


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_refused(tmp_path, value):
    x = np.zeros(1600, np.float32)
    x[7] = value
    with pytest.raises(AudioError, match="<array>: contains NaN or infinite samples"):
        load_audio(x, 16000, source_rate=16000)
    path = tmp_path / "nan.wav"
    sf.write(path, x, 16000, subtype="FLOAT")
    with pytest.raises(AudioError, match="nan.wav: contains NaN or infinite samples"):
        load_audio(path, 16000)


class _Recorded:
    """A streaming session that keeps what reaches its model (`_accept`)."""

    def __new__(cls):
        from transcribe.streaming import StreamingSession

        class Session(StreamingSession):
            def _accept(self, samples):
                self.seen.append(samples)

            def _flush(self):
                pass

            def _restart(self):
                self.seen = []

        s = Session(decode=lambda ids: "", piece=str, punctuation=set(), frame_seconds=lambda f: 0.08 * f,
                    chunk_ms=80, lookahead_ms=0)
        s.seen = []
        return s


@pytest.mark.parametrize("value", [1e30, 3e38, np.nan, np.inf])
def test_streams_refuse_huge_and_non_finite_samples(value):
    """StreamingSession.feed: the Python API's live input, `transcribe --stream` and the WebSocket's."""
    s = _Recorded()
    s.feed(np.full(1280, 0.5, np.float32))
    bad = np.zeros(1280, np.float32)
    bad[100] = value
    message = "NaN or infinite" if not np.isfinite(value) else re.escape("beyond the largest accepted (16,777,216)")
    for rate in (16000, 8000):
        with pytest.raises(AudioError, match=f"<stream>: .*{message}"):
            s.feed(bad, rate)
    assert len(s.seen) == 1  # nothing of the bad pieces reached the model
    with pytest.raises(AudioLimitError, match="<stream>: a sample rate of 4,000,000,000 Hz is outside"):
        s.feed(np.zeros(1280, np.float32), 4_000_000_000)


MODELS = SHARED / "models"


@pytest.mark.parametrize("model", ["tiny.en", "parakeet-tiny/tiny-tdt-fit.nemo"])
def test_models_refuse_huge_samples_before_any_work(model):
    """Whisper raised `RuntimeError: probability tensor contains inf/nan` (not a TranscribeError) after
    running its search; Parakeet returned "⁇ ⁇ ⁇"."""
    m = transcribe.load_model(model if model == "tiny.en" else str(MODELS / model))
    x = np.zeros(16000, np.float32)
    x[::50] = 1e30
    with pytest.raises(TranscribeError, match="<array>: a sample of magnitude 1e\\+30 is beyond"):
        m.transcribe(x)


def test_cli_exits_2_on_huge_samples(tmp_path, capsys):
    from transcribe import cli

    path = tmp_path / "loud.wav"
    sf.write(path, np.full(16000, 3e38, np.float32), 16000, subtype="FLOAT")
    rc = cli.main([str(path), "--model", str(MODELS / "parakeet-tiny" / "tiny-tdt-fit.nemo")])
    assert rc == 2
    assert "loud.wav: a sample of magnitude 3e+38 is beyond the largest accepted (16,777,216)" in capsys.readouterr().err


@pytest.mark.parametrize("offset,value", [(34, 255), (34, 0), (20, 0x1234)], ids=["bits-255", "bits-0", "format-tag-0x1234"])
def test_a_wav_no_decoder_takes_is_an_audio_error(tmp_path, offset, value):
    """A WAV header libsndfile refuses (a bit depth or format tag no decoder has) goes on to PyAV, which
    gives its stream no codec context: a clear AudioError, not PyAV's AttributeError (found by
    tools/fuzz_hostile.py)."""
    data = bytearray((AUDIO / "jfk.wav").read_bytes())
    data[offset:offset + 2] = value.to_bytes(2, "little")
    bad = tmp_path / "bad.wav"
    bad.write_bytes(bytes(data))
    with pytest.raises(AudioError, match="bad.wav"):
        load_audio(str(bad), 16000)


def _m4a(path: Path, seconds: float, rate: int = 16000, codec: str = "aac", **options) -> bytes:
    """A tone of `seconds` as one audio track in MP4 (PyAV's muxer; `options` such as movflags)."""
    import av

    x = (0.3 * np.sin(np.arange(int(seconds * rate)) * 0.05)).astype(np.float32)
    with av.open(str(path), "w", format="mp4", options=options) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(x[None, :], format="flt", layout="mono")
        frame.sample_rate = rate
        for packet in list(stream.encode(frame)) + list(stream.encode(None)):
            out.mux(packet)
    return path.read_bytes()


def _stts_deltas(data: bytes, delta: int) -> bytes:
    """`data` with every sample delta of its time-to-sample table (`stts`) set to `delta`."""
    at = data.index(b"stts")
    entries = int.from_bytes(data[at + 8:at + 12], "big")
    out = bytearray(data)
    for k in range(entries):
        struct.pack_into(">I", out, at + 16 + 8 * k, delta)
    return bytes(out)


def test_an_mp4_whose_sample_table_is_absurd_is_refused(tmp_path):
    """Issue 36 item 15: an MP4 whose `stts` gives each AAC frame 2^31 - 1 ticks decodes 0.064 s of its
    2.1 s (FFmpeg stops at the first packet past the track's end); its track header (`mdhd`) still says
    2.1 s, so the file is refused as truncated or corrupt, not transcribed short."""
    good = _m4a(tmp_path / "tone.m4a", 2.1)
    assert abs(len(load_audio(good, 16000)) / 16000 - 2.1) < 0.1
    bad = tmp_path / "stts.m4a"
    bad.write_bytes(_stts_deltas(good, 0x7FFFFFFF))
    with pytest.raises(AudioError, match=r"stts\.m4a: truncated or corrupt: its MP4 header promises 2\.1\d s of "
                                         r"audio, the file holds 0\.0\d s"):
        load_audio(str(bad), 16000)


def test_an_mp4_cut_short_is_refused_with_both_lengths(tmp_path):
    """A fast-start MP4 (its `moov` first) cut in its `mdat`: FFmpeg's error came with no length; now the
    track header's duration is given with where decoding stopped."""
    data = _m4a(tmp_path / "fast.m4a", 5.0, movflags="faststart")
    assert data.index(b"moov") < data.index(b"mdat")
    with pytest.raises(AudioError, match=r"truncated or corrupt: its MP4 header promises 5\.0\d s of audio, decoding "
                                         r"stopped at 2\.\d\d s"):
        load_audio(data[:len(data) // 2], 16000)


@pytest.mark.parametrize("codec", ["aac", "mp3", "libopus", "alac"])
@pytest.mark.parametrize("seconds", [0.3, 2.1, 7.0])
def test_whole_mp4s_still_decode(tmp_path, codec, seconds):
    """The MP4 check refuses none of the files FFmpeg writes whole: what a track header leaves out of the
    frames (an encoder's priming and padding, a frame at most) is well inside its 0.25 s slack."""
    import av

    if codec not in av.codecs_available:
        pytest.skip(f"this FFmpeg has no {codec} encoder")
    rate = 16000 if codec != "libopus" else 48000
    data = _m4a(tmp_path / "tone.m4a", seconds, rate, codec)
    got = len(load_audio(data, 16000)) / 16000
    assert seconds - 0.01 <= got <= seconds + 0.2  # all of it; an encoder pads to whole frames (AAC at 16 kHz: 64 ms)
