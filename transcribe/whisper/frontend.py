"""Whisper's front end: openai-whisper's `log_mel_spectrogram`.

16 kHz audio, periodic Hann window of 400 samples, centred STFT with reflect padding (hop 160), the
last frame dropped, power spectrum, librosa's Slaney mel filters (sr 16000, n_fft 400; 80 or 128
mels), log10 floored at 1e-10, a dynamic range of 8 (in log10 units) below the maximum, then scaled
as (x + 4) / 4.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..mel import clamped_log_mel, mel_filterbank

WHISPER_SAMPLE_RATE = 16000
WHISPER_N_FFT = 400
WHISPER_HOP = 160
WHISPER_CHUNK_SAMPLES = 30 * WHISPER_SAMPLE_RATE  # one 30 s window: 480000 samples
WHISPER_CHUNK_FRAMES = WHISPER_CHUNK_SAMPLES // WHISPER_HOP  # 3000 frames


_whisper_filters: dict[int, torch.Tensor] = {}


def whisper_mel_filters(n_mels: int = 80) -> torch.Tensor:
    """Whisper's mel filterbank [n_mels, 201] (float32, CPU); equal to openai-whisper's mel_filters.npz."""
    if n_mels not in (80, 128):
        raise ValueError(f"Whisper uses 80 or 128 mel bands, not {n_mels}")
    fb = _whisper_filters.get(n_mels)
    if fb is None:
        fb = _whisper_filters[n_mels] = mel_filterbank(WHISPER_SAMPLE_RATE, WHISPER_N_FFT, n_mels)
    return fb


@torch.no_grad()
def whisper_log_mel(audio: torch.Tensor | np.ndarray, n_mels: int = 80, padding: int = 0) -> torch.Tensor:
    """Whisper's log-mel spectrogram of 16 kHz audio.

    `audio` is [samples] or [B, samples] (a tensor on any device, or a NumPy array); `padding` zero
    samples are appended on the right first (openai-whisper's transcribe() appends 480000). Returns
    float32 [n_mels, T] or [B, n_mels, T] on the input's device, T = (samples + padding) // 160.
    The dynamic-range clamp is taken per item of a batch, so each row equals the unbatched result.
    """
    x = torch.from_numpy(np.asarray(audio)) if not torch.is_tensor(audio) else audio
    if x.dim() not in (1, 2):
        raise ValueError(f"audio must be [samples] or [B, samples], got shape {tuple(x.shape)}")
    x = x.float()
    if padding > 0:
        x = nn.functional.pad(x, (0, int(padding)))
    if x.shape[-1] == 0:
        raise ValueError("audio is empty")
    return clamped_log_mel(x, whisper_mel_filters(n_mels), WHISPER_N_FFT, WHISPER_HOP)
