"""MedASR's front end, as transformers' LasrFeatureExtractor computes it: frames of `win` samples every `hop`
(no centering, no padding: (n - win) // hop + 1 frames), a symmetric Hann window, each frame zero-padded to
`n_fft` for the real FFT, the power spectrum through a Kaldi-scale triangular filterbank of `n_mels` bands
between 125 and 7,500 Hz (the DC bin excluded, unnormalized), the natural log of it floored at 1e-5; no
dither, no pre-emphasis, no normalization. All in float64, as the reference computes it, then float32.

A batch is the inputs zero-padded to the longest; a frame counts for an input when its last sample is the
input's (the reference's attention mask), so an input's valid frames do not depend on its neighbours."""
from __future__ import annotations

import numpy as np
import torch

from .config import Features

LOG_FLOOR = 1e-5


def _kaldi_mel(hz):
    return 1127.0 * np.log(1.0 + np.asarray(hz, dtype=np.float64) / 700.0)


def mel_matrix(f: Features) -> torch.Tensor:
    """[n_fft // 2 + 1, n_mels] float64: the triangular filters on the Kaldi mel scale, row 0 (DC) zero."""
    bins = f.n_fft // 2 + 1
    freqs = np.linspace(0.0, f.sample_rate / 2.0, bins, dtype=np.float64)[1:]
    mel = _kaldi_mel(freqs)[:, None]
    edges = np.linspace(_kaldi_mel(f.lower_hz), _kaldi_mel(f.upper_hz), f.n_mels + 2, dtype=np.float64)
    lo, mid, hi = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
    w = np.maximum(0.0, np.minimum((mel - lo) / (mid - lo), (hi - mel) / (hi - mid)))
    return torch.from_numpy(np.pad(w, [[1, 0], [0, 0]]))


class LasrFrontend:
    """Audio [B, N] float32 (zero-padded) + lengths -> log-mel features [B, T, n_mels] float32 + frame counts.
    Holds only constants: safe to share between threads."""

    def __init__(self, f: Features):
        self.f = f
        self.filters = mel_matrix(f)
        self.window = torch.hann_window(f.win, periodic=False, dtype=torch.float64)

    def frames(self, samples: int) -> int:
        return max(0, (samples - self.f.win) // self.f.hop + 1)

    def __call__(self, audio: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.f
        x = audio.to(torch.float64)
        if x.shape[-1] < f.win:
            x = torch.nn.functional.pad(x, (0, f.win - x.shape[-1]))
        frames = x.unfold(-1, f.win, f.hop)
        spec = torch.fft.rfft(self.window.to(x.device) * frames, n=f.n_fft)
        power = spec.abs() ** 2
        mel = torch.clamp(power @ self.filters.to(x.device), min=LOG_FLOOR).log()
        counts = torch.clamp((lengths - f.win) // f.hop + 1, min=0)
        return mel.to(torch.float32), counts
