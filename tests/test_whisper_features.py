"""Whisper's log-mel front end against openai-whisper 20250625 (references by tools/whisper_mel_reference.py).

openai-whisper is not needed here: the reference is tests/references/whisper/mel.json.
Tolerances: the log-mel values (stored columns, per-channel means, mean, std) within 1e-4 and the
shape identical; the mel filters within 1e-6 of openai-whisper's mel_filters.npz.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import soundfile as sf
import torch

from transcribe.whisper.frontend import WHISPER_CHUNK_SAMPLES, whisper_log_mel, whisper_mel_filters

from .conftest import REPO

TOL = 1e-4
REF = json.loads((REPO / "tests" / "references" / "whisper" / "mel.json").read_text())


@functools.lru_cache(maxsize=None)
def audio(rel: str) -> np.ndarray:
    pcm, sr = sf.read(str(REPO / rel), dtype="float32")
    assert sr == 16000
    return pcm


def _id(c: dict) -> str:
    return f"{c['audio'].rsplit('/', 1)[-1][:-4]}-{c['n_mels']}mel-pad{c['padding']}"


@pytest.mark.parametrize("case", REF["cases"], ids=_id)
def test_log_mel_matches_openai_whisper(case):
    pcm = audio(case["audio"])
    assert pcm.shape[0] == case["samples"]
    mel = whisper_log_mel(pcm, n_mels=case["n_mels"], padding=case["padding"])
    assert mel.dtype == torch.float32
    assert list(mel.shape) == case["shape"]
    m = mel.double().numpy()
    cols = m[:, case["frames"]].T
    assert np.abs(cols - np.array(case["columns"])).max() <= TOL
    assert np.abs(m.mean(axis=1) - np.array(case["channel_mean"])).max() <= TOL
    assert abs(m.mean() - case["mean"]) <= TOL
    assert abs(m.std() - case["std"]) <= TOL


@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_filters_match_openai_whisper(n_mels):
    ref = REF["filters"][str(n_mels)]
    fb = whisper_mel_filters(n_mels).double().numpy()
    assert list(fb.shape) == ref["shape"]
    assert np.abs(fb.sum(axis=1) - np.array(ref["row_sums"])).max() <= 1e-6
    assert fb.argmax(axis=1).tolist() == ref["row_argmax"]
    assert np.abs(fb[ref["rows"]] - np.array(ref["row_values"])).max() <= 1e-6


def test_batched_rows_equal_single_items():
    a = torch.from_numpy(audio("../shared/audio/jfk.wav"))[:64000]
    b = torch.from_numpy(audio("../shared/audio/ls_2086-149220-0033.wav"))[:64000] * 0.01
    batch = whisper_log_mel(torch.stack([a, b]), n_mels=80, padding=WHISPER_CHUNK_SAMPLES)
    assert batch.shape == (2, 80, (64000 + WHISPER_CHUNK_SAMPLES) // 160)
    # Each row goes through the same FFT and filterbank kernels, and agrees exactly on every MKL
    # path tried. Should a library batch the FFT differently, the values just above the dynamic-
    # range floor carry float32 errors up to 4.4e-5 (against float64), hence 1e-4. A clamp taken
    # over the batch instead of per item moves the quiet row's floor by 0.96.
    for i, x in enumerate((a, b)):
        torch.testing.assert_close(batch[i], whisper_log_mel(x, 80, WHISPER_CHUNK_SAMPLES), rtol=0, atol=1e-4)


def test_bad_input():
    with pytest.raises(ValueError, match="80 or 128"):
        whisper_log_mel(np.zeros(1600, np.float32), n_mels=64)
    with pytest.raises(ValueError, match="empty"):
        whisper_log_mel(np.zeros(0, np.float32))
    with pytest.raises(ValueError, match="shape"):
        whisper_log_mel(np.zeros((1, 1, 1600), np.float32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runs_on_the_input_device():
    a = torch.from_numpy(audio("../shared/audio/jfk.wav"))
    on_gpu = whisper_log_mel(a.cuda(), n_mels=128, padding=WHISPER_CHUNK_SAMPLES)
    assert on_gpu.device.type == "cuda"
    on_cpu = whisper_log_mel(a, 128, WHISPER_CHUNK_SAMPLES)
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=0, atol=1e-4)
