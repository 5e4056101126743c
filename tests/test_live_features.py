"""LiveMelFeatures: log-mel frames pushed piece by piece equal NemoMelFrontEnd's whole-signal frames.

Each frame's STFT is computed from the same samples and zero padding as the whole-signal STFT, and the
operations after it (`NemoMelFrontEnd.log_mel`: a fixed-order banded mel sum, the log in float64) do not
depend on how many frames are computed together, so on the CPUs tested (Intel Xeon with AMX, AMD EPYC
with AVX-512, and both with MKL and ATen forced down to AVX2) the frames are bitwise equal. The one step
left to a library is the FFT, which may take other code paths for other numbers of frames on other CPUs;
`assert_same_frames` therefore allows what float32 FFT rounding can move: |dE| <= 1e-4 of the frame's
largest mel energy E (the FFT's error is norm-wise: about eps * log2(n_fft) of the frame's energy per bin,
~1e-6; a wrong sample, pad or mask moves E by far more). Tokens from live features equal the offline
ones exactly (tests/test_parakeet_streaming.py).
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from transcribe.audio import load_audio
from transcribe.nemo.checkpoint import read_nemo
from transcribe.nemo.frontend import NemoMelFrontEnd
from transcribe.nemo.live_features import LiveMelFeatures
from transcribe.parakeet.config import FrontEndConfig, settings

from .conftest import AUDIO, TINY

STREAMING_NEMO = TINY / "tiny-tdt-streaming-random.nemo"
PIECE_SIZES = [0, 1, 2, 3, 7, 80, 159, 160, 161, 255, 256, 257, 399, 400, 401, 511, 512, 513, 1234, 4000, 16000]


def nemo_frontend() -> NemoMelFrontEnd:
    """The front end as the model builds it from the streaming model's preprocessor config."""
    pre = dict(read_nemo(STREAMING_NEMO).config["preprocessor"])
    pre.pop("_target_")
    kwargs = settings("preprocessor", pre, set(inspect.signature(FrontEndConfig).parameters) - {"self"})
    fe = NemoMelFrontEnd(FrontEndConfig(**kwargs))
    assert fe.normalize is None and fe.n_fft == 512 and fe.win_length == 400 and fe.n_mels == 128
    return fe


SYNTHETIC = {
    "nfft400-80mels": dict(window_size=None, window_stride=None, n_window_size=400, n_window_stride=160, n_fft=400, features=80, normalize="NA"),
    "nfft1024-no-preemph": dict(window_size=0.05, window_stride=0.0125, n_fft=1024, features=80, preemph=None,
                                normalize=None, window="hamming"),
    "nfft256-hop160": dict(window_size=None, window_stride=None, n_window_size=256, n_window_stride=160, n_fft=256, features=40, normalize="NA",
                           mag_power=1.0, log_zero_guard_type="clamp", log_zero_guard_value="tiny"),
    "odd-nfft-no-log": dict(window_size=None, window_stride=None, n_window_size=300, n_window_stride=128, n_fft=401, features=64, normalize="NA", log=False),
    "exact-pad": dict(window_size=None, window_stride=None, n_window_size=400, n_window_stride=160, n_fft=512, features=80, normalize="NA", exact_pad=True),
    "exact-pad-no-preemph": dict(window_size=None, window_stride=None, n_window_size=400, n_window_stride=160, n_fft=512, features=80, normalize="NA",
                                 exact_pad=True, preemph=None),
}


def frontend(name: str) -> NemoMelFrontEnd:
    return nemo_frontend() if name == "nemo" else NemoMelFrontEnd(FrontEndConfig(pad_to=16, **SYNTHETIC[name]))


def whole(fe: NemoMelFrontEnd, audio: np.ndarray) -> torch.Tensor:
    feats, n = fe(torch.from_numpy(audio)[None], torch.tensor([len(audio)]))
    return feats[0, :, : int(n[0])]


def assert_same_frames(got: torch.Tensor, ref: torch.Tensor, fe: NemoMelFrontEnd, what=None) -> None:
    """got equals ref within float32 FFT rounding (the module's text), compared as mel energies."""
    assert got.shape == ref.shape and got.dtype == ref.dtype == torch.float32, (what, got.shape, ref.shape)
    if torch.equal(got, ref):
        return
    if fe.log:
        g = fe._guard(ref)
        e_got, e_ref = got.double().exp(), ref.double().exp()
        if fe.log_zero_guard_type == "add":
            e_got, e_ref = e_got - g, e_ref - g
    else:
        e_got, e_ref = got.double(), ref.double()
    scale = e_ref.abs().amax(dim=0, keepdim=True).clamp_min(1e-30)
    worst = float(((e_got - e_ref).abs() / scale).max())
    assert worst <= 1e-4, (what, worst)


def stream(live: LiveMelFeatures, audio: np.ndarray, sizes) -> torch.Tensor:
    out, i, frames = [], 0, 0
    for size in sizes:
        piece = audio[i : i + size]
        i += len(piece)
        got = live.push(piece if size % 2 else torch.from_numpy(piece))  # numpy and torch pieces
        assert got.dtype == torch.float32 and got.shape[0] == live.n_mels
        out.append(got)
        frames += got.shape[1]
        assert live.frames == frames and live.samples == i
    assert i == len(audio)
    out.append(live.finish())
    return torch.cat(out, dim=1)


def random_sizes(rng: np.random.Generator, n: int) -> list[int]:
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(rng.choice(PIECE_SIZES)) if rng.random() < 0.8 else int(rng.integers(1, 3000)))
    sizes[-1] -= sum(sizes) - n
    return sizes


def random_signal(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal(n).astype(np.float32) * np.float32(rng.uniform(0.01, 0.5))
    if n > 2000:  # a stretch of exact silence (the log's zero guard) and a louder one
        a = int(rng.integers(0, n - 1000))
        x[a : a + 1000] = 0.0
        b = int(rng.integers(0, n - 1000))
        x[b : b + 1000] *= 8
    return x


@pytest.mark.parametrize("name", ["nemo", *SYNTHETIC])
def test_random_pieces_equal_whole_signal(name):
    fe = frontend(name)
    live = LiveMelFeatures(fe)
    for seed in range(4):
        rng = np.random.default_rng(seed)
        audio = random_signal(rng, int(rng.integers(1, 3 * 16000)))
        ref = whole(fe, audio)
        got = stream(live, audio, random_sizes(rng, len(audio)))
        assert_same_frames(got, ref, fe, (name, seed))
        live.reset()


def test_jfk_random_pieces():
    fe = nemo_frontend()
    audio = load_audio(AUDIO / "jfk.wav", 16000)
    assert audio.dtype == np.float32 and audio.ndim == 1
    ref = whole(fe, audio)
    live = LiveMelFeatures(fe)
    for seed in range(3):
        got = stream(live, audio, random_sizes(np.random.default_rng(100 + seed), len(audio)))
        assert_same_frames(got, ref, fe, seed)
        live.reset()
    # One piece, one sample at a time for the first second, then 10 ms pieces.
    sizes = [len(audio)]
    assert_same_frames(stream(live, audio, sizes), ref, fe)
    live.reset()
    sizes = [1] * 16000 + [160] * ((len(audio) - 16000) // 160)
    sizes.append(len(audio) - sum(sizes))
    assert_same_frames(stream(live, audio, sizes), ref, fe)


@pytest.mark.parametrize("name", ["nemo", "nfft256-hop160", "odd-nfft-no-log", "exact-pad", "exact-pad-no-preemph"])
def test_short_streams(name):
    fe = frontend(name)
    live = LiveMelFeatures(fe)
    rng = np.random.default_rng(7)
    for n in [0, 1, 2, 100, 159, 160, 161, 255, 256, 257, 300, 351, 352, 400, 511, 512, 513, 672, 700]:
        audio = random_signal(rng, n)
        got = [live.push(audio[:1]), live.push(audio[1:]), live.finish()]
        got = torch.cat(got, dim=1)
        assert got.shape[0] == fe.n_mels and got.dtype == torch.float32
        if n == 0:
            assert got.shape == (fe.n_mels, 0)
        try:
            ref = whole(fe, audio)
        except RuntimeError:
            # The whole-signal STFT refuses a padded signal shorter than n_fft (with exact_pad, a
            # signal shorter than n_fft - 2 * pad; with an odd n_fft, the empty one); its frame count
            # (output_lengths) is <= 0 there, and the stream gives no frames.
            assert (fe.exact_pad or n == 0) and int(fe.output_lengths(torch.tensor([n]))[0]) <= 0
            assert got.shape == (fe.n_mels, 0)
        else:
            assert_same_frames(got, ref, fe, (name, n))
        live.reset()


def test_frames_are_emitted_as_soon_as_final():
    """With n_fft 512, hop 160: frame t needs samples up to t*160 + 256 and is valid once
    (t+1)*160 + 512 <= n + 512, i.e. at n >= t*160 + 256."""
    fe = nemo_frontend()
    live = LiveMelFeatures(fe)
    audio = random_signal(np.random.default_rng(3), 16000)
    counts = [live.push(audio[i : i + 1]).shape[1] for i in range(2000)]
    emitted = np.cumsum(counts)
    for n in range(1, 2001):  # after n samples
        assert emitted[n - 1] == (0 if n < 256 else (n - 256) // 160 + 1), n


def test_input_types_and_float64_like_the_frontend():
    fe = frontend("nfft400-80mels")
    rng = np.random.default_rng(11)
    audio64 = rng.standard_normal(5000) * 0.1
    feats, n = fe(torch.from_numpy(audio64)[None], torch.tensor([5000]))  # the front end casts to float32
    live = LiveMelFeatures(fe)
    got = torch.cat([live.push(audio64[:1234]), live.push(torch.from_numpy(audio64[1234:])), live.finish()], dim=1)
    assert_same_frames(got, feats[0, :, : int(n[0])], fe)
    live.reset()
    with pytest.raises(ValueError, match="1-D"):
        live.push(np.zeros((2, 100), np.float32))


@pytest.mark.parametrize("normalize", ["per_feature", "all_features"])
def test_normalizing_frontend_is_refused(normalize):
    with pytest.raises(ValueError, match="normaliz"):
        LiveMelFeatures(NemoMelFrontEnd(FrontEndConfig(normalize=normalize)))


def test_not_a_frontend_is_refused():
    with pytest.raises(TypeError):
        LiveMelFeatures(object())


def test_push_after_finish_and_reset():
    fe = nemo_frontend()
    live = LiveMelFeatures(fe)
    rng = np.random.default_rng(5)
    a, b = random_signal(rng, 7000), random_signal(rng, 9000)
    first = torch.cat([live.push(a), live.finish()], dim=1)
    assert_same_frames(first, whole(fe, a), fe)
    assert live.finished
    with pytest.raises(RuntimeError, match="reset"):
        live.push(b)
    with pytest.raises(RuntimeError, match="reset"):
        live.push(b[:0])
    with pytest.raises(RuntimeError):
        live.finish()
    live.reset()
    assert live.samples == 0 and live.frames == 0 and not live.finished
    second = torch.cat([live.push(b[:3000]), live.push(b[3000:]), live.finish()], dim=1)
    assert_same_frames(second, whole(fe, b), fe)
    # Reset mid-stream forgets the samples held (pre-emphasis's previous sample included).
    live.reset()
    live.push(a[:5000])
    live.reset()
    assert_same_frames(torch.cat([live.push(b), live.finish()], dim=1), whole(fe, b), fe)


def test_empty_stream():
    live = LiveMelFeatures(nemo_frontend())
    assert live.push(np.zeros(0, np.float32)).shape == (128, 0)
    assert live.push(torch.zeros(0)).shape == (128, 0)
    out = live.finish()
    assert out.shape == (128, 0) and out.dtype == torch.float32
    assert live.samples == 0 and live.frames == 0


def test_memory_is_bounded_over_60_s_in_10_ms_pieces():
    fe = nemo_frontend()
    live = LiveMelFeatures(fe)
    audio = random_signal(np.random.default_rng(9), 60 * 16000)
    out, most = [], 0
    for i in range(0, len(audio), 160):
        out.append(live.push(audio[i : i + 160]))
        most = max(most, live.held)
    # At most one window plus one hop plus a piece: 512 + 160 + 160.
    assert most <= fe.n_fft + 2 * fe.hop_length
    out.append(live.finish())
    assert_same_frames(torch.cat(out, dim=1), whole(fe, audio), fe)
