"""transcribe.pauses: cuts at pauses that cover the whole input, each piece at most max_s.

Synthetic speech is modulated noise and tones (0.1-0.5 amplitude) between silences of known
positions; real speech is ../shared/audio/dev's clips joined by silences. The silero tests need the
optional silero-vad package and skip, saying so, without it.
"""
from __future__ import annotations

import importlib.util
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from transcribe import pauses
from transcribe.errors import ModelError, TranscribeError
from transcribe.long_input import Piece, split_at_pauses
from transcribe.pauses import Activity, speech_activity

SR = 16000
AUDIO = Path(__file__).parents[2] / "shared" / "audio"

# importorskip would import silero_vad, which sets torch's thread count for the whole test process.
HAS_SILERO = importlib.util.find_spec("silero_vad") is not None
needs_silero = pytest.mark.skipif(not HAS_SILERO, reason="silero-vad is not installed (pip install silero-vad)")


def burst(rng, seconds, sr=SR, amp=0.3):
    """Speech-like sound: noise and a tone under a syllable-rate envelope that never falls silent."""
    n = int(round(seconds * sr))
    t = np.arange(n) / sr
    env = amp * (0.55 + 0.45 * np.sin(2 * np.pi * rng.uniform(3, 6) * t + rng.uniform(0, 6.3)))
    tone = np.sin(2 * np.pi * rng.uniform(120, 300) * t)
    return (env * (0.6 * rng.standard_normal(n) + 0.4 * tone)).astype(np.float32)


def layout(rng, spans, sr=SR, amp=(0.1, 0.5), noise=0.0):
    """Bursts and silences, in seconds: spans alternate (burst, silence, burst, ...). Returns the
    audio and the silences as sample ranges."""
    parts, silences, pos = [], [], 0
    for k, sec in enumerate(spans):
        n = int(round(sec * sr))
        if k % 2 == 0:
            parts.append(burst(rng, sec, sr, rng.uniform(*amp)))
        else:
            parts.append(np.zeros(n, np.float32))
            silences.append((pos, pos + n))
        pos += n
    x = np.concatenate(parts)
    if noise:
        x += (noise * rng.standard_normal(len(x))).astype(np.float32)
    return x, silences


def check_cover(pieces, n, max_n):
    assert pieces[0].start == 0 and pieces[-1].end == n
    for p, q in zip(pieces, pieces[1:]):
        assert p.end == q.start
    for p in pieces:
        assert 0 < len(p) <= max_n, (p, max_n)
        assert isinstance(p.start, int) and isinstance(p.end, int)


def cuts(pieces):
    return [p.end for p in pieces[:-1]]


def inside(cut, silences, margin):
    return any(a + margin <= cut <= b - margin for a, b in silences)


# ------------------------------------------------------------------------------------------ energy

@pytest.mark.parametrize("noise", [0.0, 3e-3])  # digital silence; a noise floor at -50 dBFS
def test_cuts_land_inside_the_silences(noise):
    rng = np.random.default_rng(1)
    spans = []
    for _ in range(14):
        spans += [rng.uniform(15, 35), rng.uniform(0.4, 1.5)]
    x, silences = layout(rng, spans[:-1], noise=noise)
    pieces = split_at_pauses(x, SR, max_s=90, min_s=10, detector="energy")
    check_cover(pieces, len(x), 90 * SR)
    assert len(pieces) >= len(x) / (90 * SR)
    for c in cuts(pieces):
        assert inside(c, silences, int(0.1 * SR)), (c / SR, [(a / SR, b / SR) for a, b in silences])


def test_a_long_pause_wins_over_a_short_later_one_and_a_later_one_over_an_equal_earlier():
    rng = np.random.default_rng(2)
    # 0-40 burst, 40-41 pause (1 s), 41-85 burst, 85-85.25 pause (0.25 s), 85.25-120 burst
    x, silences = layout(rng, [40, 1.0, 44, 0.25, 35])
    pieces = split_at_pauses(x, SR, max_s=90, min_s=10, detector="energy")
    assert 40 * SR < pieces[0].end < 41 * SR
    # two equal pauses, at 30 s and at 70 s: the later one, so pieces are long
    x, silences = layout(rng, [30, 0.8, 39.2, 0.8, 40])
    pieces = split_at_pauses(x, SR, max_s=90, min_s=10, detector="energy")
    a, b = silences[1]
    assert a < pieces[0].end < b
    assert abs(pieces[0].end - (a + b) / 2) < 0.05 * SR  # the middle of the pause


def test_a_long_silence_is_cut_late_keeping_half_a_second_before_speech():
    rng = np.random.default_rng(3)
    x, silences = layout(rng, [50, 20, 50])  # speech resumes at 70 s
    pieces = split_at_pauses(x, SR, max_s=90, min_s=10, detector="energy")
    c = pieces[0].end
    assert 69 * SR < c < 70 * SR - 0.3 * SR


def test_last_piece_is_not_a_sliver():
    rng = np.random.default_rng(4)
    x, _ = layout(rng, [20, 0.6, 20, 0.6, 20, 0.6, 20, 0.6, 12])  # 94.4 s
    pieces = split_at_pauses(x, SR, max_s=90, min_s=10, detector="energy")
    assert len(pieces) == 2 and len(pieces[-1]) >= 10 * SR


def test_invariants_on_random_layouts():
    rng = np.random.default_rng(1234)
    split = 0
    for trial in range(60):
        sr = int(rng.choice([8000, 16000, 22050, 44100]))
        max_s = float(rng.choice([1.0, 1.7, 5.0, 30.0, 60.0, 90.0, 120.0]))
        min_s = float(rng.uniform(0, max_s * 0.9)) if rng.random() < 0.8 else 0.0
        spans = [rng.uniform(0.05, 1.5 * max_s) if k % 2 == 0 else rng.choice([0.01, 0.2, 0.5, 2.0, 8.0])
                 for k in range(int(rng.integers(1, 9)))]
        x, _ = layout(rng, spans, sr=sr, noise=float(rng.choice([0.0, 1e-3])))
        if rng.random() < 0.2:
            x = x[:int(rng.integers(1, len(x) + 1))]
        pieces = split_at_pauses(x, sr, max_s=max_s, min_s=min_s, detector="energy")
        check_cover(pieces, len(x), int(max_s * sr))
        if len(x) <= int(max_s * sr):
            assert pieces == [Piece(0, len(x))]
        for p in pieces[:-1]:
            assert len(p) >= max(1, int(min_s * sr)), (trial, p, min_s)
        split += len(pieces) > 1
    assert split >= 30  # most layouts are long enough to be cut


def test_no_pause_still_cuts_at_most_max_s_late_in_the_window():
    rng = np.random.default_rng(5)
    x = burst(rng, 400.0, amp=0.4)  # continuous, never quiet
    pieces = split_at_pauses(x, SR, max_s=60, min_s=6, detector="energy")
    check_cover(pieces, len(x), 60 * SR)
    for p in pieces[:-1]:
        assert len(p) >= (60 - (60 - 6) / 3) * SR - SR // 100  # the last third of [min_s, max_s]


def test_no_pause_cuts_at_the_quietest_point():
    """Continuous sound with a short dip (bridged by the hangover: not a pause): the cut is there."""
    rng = np.random.default_rng(6)
    x = burst(rng, 100.0, amp=0.4)
    dip = slice(int(80.0 * SR), int(80.09 * SR))
    x[dip] *= 0.02
    assert not (speech_activity(x, SR, "energy").speech[7990:8010] == 0).any()
    pieces = split_at_pauses(x, SR, max_s=90, min_s=10, detector="energy")
    assert dip.start <= pieces[0].end <= dip.stop


def test_constant_noise_and_tone_have_no_pauses():
    rng = np.random.default_rng(7)
    for x in ((0.2 * rng.standard_normal(200 * SR)).astype(np.float32),
              (0.3 * np.sin(2 * np.pi * 440 * np.arange(200 * SR) / SR)).astype(np.float32)):
        act = speech_activity(x, SR, "energy")
        assert act.speech.min() == 1.0
        pieces = split_at_pauses(x, SR, max_s=50, min_s=5, detector="energy")
        check_cover(pieces, len(x), 50 * SR)


@pytest.mark.parametrize("n", [1, 100, 161, 16000 * 3, 16000 * 500])
def test_all_zeros(n):
    x = np.zeros(n, np.float32)
    act = speech_activity(x, SR, "energy")
    assert act.hop == 160 and act.frames == -(-n // 160) and not act.speech.any()
    assert np.isfinite(act.speech).all()
    pieces = split_at_pauses(x, SR, max_s=90, min_s=10, detector="energy")
    check_cover(pieces, n, 90 * SR)
    if n > 90 * SR:
        assert len(pieces[0]) == 90 * SR  # silence everywhere: pieces as long as allowed


def test_one_hour_in_pieces_of_at_most_max_s():
    rng = np.random.default_rng(8)
    pattern, silences = layout(rng, [7.3, 0.6, 11.1, 0.4, 10.6])  # 30 s
    x = np.tile(pattern, 120)  # 1 hour, 57.6 M samples
    pieces = split_at_pauses(x, SR, max_s=90, min_s=10, detector="energy")
    check_cover(pieces, len(x), 90 * SR)
    assert 40 <= len(pieces) <= 60
    period = len(pattern)
    for c in cuts(pieces):
        assert inside(c % period, silences, int(0.1 * SR)), c / SR


def test_activity_marks_bursts_and_silences():
    rng = np.random.default_rng(9)
    x, silences = layout(rng, [3, 2, 3], sr=8000)
    act = speech_activity(x, 8000, "energy")
    assert isinstance(act, Activity) and act.detector == "energy" and act.hop == 80
    assert act.speech.dtype == np.float32 and set(np.unique(act.speech)) <= {0.0, 1.0}
    a, b = silences[0]
    assert act.speech[a // 80 + 10:b // 80 - 10].max() == 0       # silence, hangover aside
    assert act.speech[: a // 80].min() == 1 and act.speech[b // 80 + 1:].min() == 1


def test_integer_and_float64_and_tensor_input_cut_as_float32():
    rng = np.random.default_rng(10)
    x, _ = layout(rng, [30, 0.7, 40, 0.9, 30, 0.5, 25])
    want = split_at_pauses(x, SR, max_s=60, min_s=10, detector="energy")
    assert pauses._as_float(np.array([-32768, 0, 16384], np.int16)).tolist() == [-1.0, 0.0, 0.5]
    assert pauses._as_float(np.array([0, 128, 192], np.uint8)).tolist() == [-1.0, 0.0, 0.5]
    as_int16 = np.round(x * 32767).astype(np.int16)
    assert split_at_pauses(as_int16, SR, max_s=60, min_s=10, detector="energy") == want
    assert split_at_pauses(x.astype(np.float64), SR, max_s=60, min_s=10, detector="energy") == want
    import torch
    assert split_at_pauses(torch.from_numpy(x), SR, max_s=60, min_s=10, detector="energy") == want


def test_huge_finite_values_are_not_taken_for_infinity():
    x = np.full(200 * SR, 1e30, np.float32)
    x[100 * SR:101 * SR] = 0
    pieces = split_at_pauses(x, SR, max_s=150, min_s=10, detector="energy")
    assert 100 * SR < pieces[0].end < 101 * SR


def test_piece_seconds():
    assert Piece(8000, 24000).seconds(16000) == (0.5, 1.5) and len(Piece(8000, 24000)) == 16000


# ------------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("pcm, kwargs, message", [
    (np.zeros((2, 16000), np.float32), {}, "1-D"),
    (np.zeros(0, np.float32), {}, "empty"),
    (np.array([0.0, np.nan, 0.0], np.float32), {}, "non-finite"),
    (np.array([0.0, 0.1, -np.inf], np.float64), {}, "non-finite"),
    (np.zeros(10, bool), {}, "real numbers"),
    (np.zeros(10, np.complex64), {}, "real numbers"),
    (np.zeros(10, np.float32), {"max_s": 10.0, "min_s": 10.0}, "min_s < max_s"),
    (np.zeros(10, np.float32), {"max_s": 5.0, "min_s": 8.0}, "min_s < max_s"),
    (np.zeros(10, np.float32), {"max_s": 0.5, "min_s": 0.1}, "at least 1 second"),
    (np.zeros(10, np.float32), {"min_s": -1.0}, "min_s"),
    (np.zeros(10, np.float32), {"max_s": float("nan")}, "finite"),
    (np.zeros(10, np.float32), {"detector": "webrtc"}, "unknown pause detector"),
    (np.zeros(10, np.float32), {"sample_rate": 0}, "sample_rate"),
    (np.zeros(10, np.float32), {"sample_rate": 16000.5}, "sample_rate"),
])
def test_bad_input_is_a_clear_error(pcm, kwargs, message):
    with pytest.raises(TranscribeError, match=message):
        split_at_pauses(pcm, **kwargs)


def test_bad_input_to_speech_activity():
    with pytest.raises(TranscribeError, match="1-D"):
        speech_activity(np.zeros((10, 2)), SR)
    with pytest.raises(TranscribeError, match="empty"):
        speech_activity([], SR)
    with pytest.raises(TranscribeError, match="non-finite.*sample 5"):
        speech_activity(np.array([0, 0, 0, 0, 0, np.nan]), SR, "energy")
    with pytest.raises(TranscribeError, match="unknown pause detector"):
        speech_activity(np.zeros(10), SR, "vad")


def test_non_finite_far_into_a_long_input_is_found():
    x = np.zeros(30 * 60 * SR, np.float32)
    x[25 * 60 * SR + 7] = np.inf
    with pytest.raises(TranscribeError, match=f"sample {25 * 60 * SR + 7}"):
        split_at_pauses(x, SR, detector="energy")


# ------------------------------------------------------------------------ silero: package missing

def test_without_silero_vad_silero_is_an_error_and_auto_is_energy(monkeypatch):
    monkeypatch.setattr(pauses.importlib.util, "find_spec", lambda name, *a: None)
    x = np.zeros(SR, np.float32)
    with pytest.raises(TranscribeError, match="silero-vad"):
        speech_activity(x, SR, "silero")
    with pytest.raises(TranscribeError, match="silero-vad"):
        split_at_pauses(x, SR, detector="silero")
    assert speech_activity(x, SR, "auto").detector == "energy"


def test_the_model_reader_refuses_anything_but_weights(tmp_path):
    """A TorchScript-like archive whose pickle calls a function: refused, and the call never made."""
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    path = tmp_path / "silero_vad.jit"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("m/data.pkl", pickle.dumps({"_model": Evil()}, protocol=2))
    with pytest.raises(ModelError, match="refused global"):
        pauses._read_script_weights(str(path))
    assert not marker.exists()
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("m/data.pkl", pickle.dumps({"_model": 1}, protocol=2))
    with pytest.raises(ModelError):
        pauses._read_script_weights(str(path))
    path.write_bytes(b"not a zip")
    with pytest.raises(ModelError, match="cannot read"):
        pauses._read_script_weights(str(path))


# ----------------------------------------------------------------------------------- real speech

def real_speech(gap_s=1.5):
    """../shared/audio/dev's clips joined by silences (and a faint noise floor): audio, gaps."""
    from transcribe.audio import load_audio

    files = sorted((AUDIO / "dev").glob("*.wav"))
    assert files, f"no real speech at {AUDIO / 'dev'}"  # ../shared is always beside the repository
    rng = np.random.default_rng(11)
    parts, gaps, pos = [], [], 0
    for f in files:
        clip = load_audio(str(f), SR)
        parts += [clip, np.zeros(int(gap_s * SR), np.float32)]
        gaps.append((pos + len(clip), pos + len(clip) + int(gap_s * SR)))
        pos += len(clip) + int(gap_s * SR)
    x = np.concatenate(parts)
    return x + (1e-4 * rng.standard_normal(len(x))).astype(np.float32), gaps


def level_db(x, at, half=int(0.05 * SR)):
    seg = x[max(0, at - half):at + half].astype(np.float64)
    return 10 * np.log10(np.mean(seg ** 2) + 1e-12)


def is_quiet(x, at):
    """The 100 ms around `at` are 15 dB below the loud tenth of the 10 s around it, or within 6 dB of
    its quiet tenth (a noisy clip's own floor): not a word."""
    near = [level_db(x, i) for i in range(max(0, at - 5 * SR), min(len(x), at + 5 * SR), SR // 20)]
    low, high = np.percentile(near, [10, 90])
    return level_db(x, at) <= high - 15 or level_db(x, at) <= low + 6


@pytest.mark.parametrize("detector", ["energy", pytest.param("silero", marks=needs_silero)])
def test_real_speech_is_cut_in_quiet(detector):
    x, gaps = real_speech()
    pieces = split_at_pauses(x, SR, max_s=30, min_s=5, detector=detector)
    check_cover(pieces, len(x), 30 * SR)
    assert len(pieces) <= 2 * len(x) / (30 * SR)
    for c in cuts(pieces):
        assert is_quiet(x, c), (c / SR, level_db(x, c))
    if detector == "energy":  # most cuts in the joins, the rest in the clips' own pauses (silero's
        # pauses take in the clips' noisy lead-ins and tails, so its cuts fall there as often)
        assert sum(inside(c, gaps, 0) for c in cuts(pieces)) >= 0.6 * len(cuts(pieces))


# ---------------------------------------------------------------------------------------- silero

@needs_silero
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_silero_probabilities_equal_the_torchscript_model():
    """The reference: silero's own TorchScript model run by torch.jit.load (a test tool only), a
    frame of 512 samples at a time as its get_speech_timestamps does."""
    import torch

    from transcribe.audio import load_audio

    rng = np.random.default_rng(12)
    parts = [load_audio(str(AUDIO / "jfk.wav"), SR), np.zeros(SR // 2, np.float32),
             load_audio(str(AUDIO / "ls_2086-149220-0033.wav"), SR), burst(rng, 2.0)]
    x = np.concatenate(parts)[:-123]  # a partial last frame
    act = speech_activity(x, SR, "silero")
    assert act.detector == "silero" and act.hop == 512 and act.frames == -(-len(x) // 512)
    ref_model = torch.jit.load(pauses.silero_model_path())
    ref_model.reset_states()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a frame at a time: threads only wait on each other (and a busy machine)
    try:
        ref = []
        with torch.no_grad():
            for i in range(0, len(x), 512):
                chunk = torch.from_numpy(x[i:i + 512])
                chunk = torch.nn.functional.pad(chunk, (0, 512 - len(chunk)))
                ref.append(ref_model(chunk, SR).item())
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_allclose(act.speech, np.array(ref, np.float32), atol=1e-4)
    assert act.speech[:100].max() > 0.9  # speech is found


@needs_silero
def test_silero_blocks_carry_state():
    """Probabilities over several network blocks equal those of one block: the state carries."""
    x, _ = real_speech(gap_s=0.5)
    x = x[:int(1.5 * pauses._SILERO_BLOCK * 512)]
    whole = speech_activity(x, SR, "silero").speech
    block = pauses._SILERO_BLOCK
    try:
        pauses._SILERO_BLOCK = 700
        split = speech_activity(x, SR, "silero").speech
    finally:
        pauses._SILERO_BLOCK = block
    np.testing.assert_allclose(split, whole, atol=1e-5)


@needs_silero
def test_silero_wants_16_khz_and_auto_picks_it_there():
    with pytest.raises(TranscribeError, match="16000 Hz"):
        speech_activity(np.zeros(8000, np.float32), 8000, "silero")
    assert speech_activity(np.zeros(8000, np.float32), 8000, "auto").detector == "energy"
    assert speech_activity(np.zeros(16000, np.float32), SR, "auto").detector == "silero"


def test_silero_hysteresis_and_padding():
    p = np.array([0.1, 0.6, 0.4, 0.4, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.45, 0.1], np.float32)
    speech = pauses._silero_speech(p)
    # speech 1..3 (0.4 stays speech after 0.6), padded by 2 frames; 0.45 alone never starts speech
    assert speech.tolist() == [True] * 6 + [False] * 6


def test_the_energy_path_does_not_import_torch():
    """A model family may split audio before loading anything: the energy path is numpy only."""
    code = ("import sys, numpy as np; from transcribe.long_input import split_at_pauses; "
            "p = split_at_pauses(np.zeros(200 * 16000, np.float32), detector='energy'); "
            "assert len(p) == 3 and 'torch' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])
