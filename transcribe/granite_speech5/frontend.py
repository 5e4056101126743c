"""Granite Speech 5's front end, as transformers' `GraniteSpeech5FeatureExtractor` computes it for one input:
80 log-mels every 10 ms (torchaudio's MelSpectrogram defaults: a centre-padded STFT with reflect padding, n_fft
512, a periodic Hann window of 400 zero-padded to 512, hop 160, power 2, HTK-scale filters without
normalization: `mel.htk_mel_filterbank`), F = N // 160 frames rounded up to even (the audio zero-padded by a
sample when the last frame needs it), log10 of at least 1e-10, floored at the input's maximum minus
`logmel_floor_db` (8), scaled `/ 4 + 1`; each frame followed by its delta over 3 frames ((next - previous) / 2,
the edges repeated: torchaudio's compute_deltas), pairs of frames stacked: [F / 2, 4 * 80] every 20 ms.

Each input is computed alone (its own maximum, its own edges), so a batch gives each input what it gets alone.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..mel import htk_mel_filterbank

SAMPLE_RATE = 16000
N_FFT = 512
WIN_LENGTH = 400
HOP = 160
STACK = 2
SAMPLES_PER_FRAME = STACK * HOP  # one stacked feature frame: 20 ms


def frames(samples: int) -> int:
    """Stacked feature frames of an input of `samples` samples: ceil((samples // 160) / 2)."""
    return -(-(samples // HOP) // STACK)


class FrontEnd:
    """pcm (float32, 16 kHz) -> features [T, 4 * n_mels]; stateless, safe to share between threads."""

    sample_rate = SAMPLE_RATE

    def __init__(self, n_mels: int = 80, floor: float = 8.0):
        self.n_mels = n_mels
        self.floor = floor
        self.filters = htk_mel_filterbank(SAMPLE_RATE, N_FFT, n_mels)  # [n_fft // 2 + 1, n_mels]
        self.window = torch.hann_window(WIN_LENGTH, periodic=True, dtype=torch.float32, device="cpu")

    def __call__(self, pcm) -> torch.Tensor:
        pcm = torch.as_tensor(pcm, dtype=torch.float32).reshape(-1)
        t = frames(pcm.numel())
        if t == 0:
            return pcm.new_zeros(0, 2 * STACK * self.n_mels)
        n_frames = STACK * t
        need = (n_frames - 1) * HOP + 1
        if pcm.numel() < need:
            pcm = F.pad(pcm, (0, need - pcm.numel()))
        spec = torch.stft(pcm, N_FFT, hop_length=HOP, win_length=WIN_LENGTH, window=self.window, center=True,
                          pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
        power = spec[:, :n_frames].abs().pow(2.0)  # [n_freqs, F]
        logmel = (power.transpose(0, 1) @ self.filters).clamp_min(1e-10).log10()  # [F, n_mels]
        logmel = torch.maximum(logmel, logmel.max() - self.floor) / 4.0 + 1.0
        edges = torch.cat([logmel[:1], logmel, logmel[-1:]])
        deltas = (edges[2:] - edges[:-2]) / 2.0
        return torch.cat([logmel, deltas], dim=1).reshape(t, 2 * STACK * self.n_mels)
