"""Granite Speech's front end: 80 log-mels (HTK scale, power 2) every 10 ms, floored at the
utterance's maximum minus 8 (log10), scaled to `/4 + 1`, then pairs of frames stacked into one
160-wide frame every 20 ms.

It follows IBM's remote code (revision 99a4df9): a centre-padded STFT (n_fft 512, a periodic Hann
window of 400, hop 160, reflect padding) gives N // 160 + 1 frames for N samples, of which the first
2 * (N // 320) are kept, so the encoder sees T = N // 320 frames. Each input is computed alone (its
own maximum), so a batch gives each input what it gets alone.
"""
from __future__ import annotations

import torch

from ..mel import htk_mel_filterbank as _htk

SAMPLE_RATE = 16000
N_FFT = 512
WIN_LENGTH = 400
HOP = 160
N_MELS = 80
SAMPLES_PER_FRAME = 2 * HOP  # one stacked encoder frame


def htk_mel_filterbank(sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> torch.Tensor:
    """This front end's filters (`mel.htk_mel_filterbank` with its sizes): [n_fft//2+1, n_mels]."""
    return _htk(sample_rate, n_fft, n_mels)


class GraniteFrontEnd:
    """pcm (float32, 16 kHz) -> features [T, 160]; stateless, safe to share between threads."""

    sample_rate = SAMPLE_RATE

    def __init__(self):
        self.filters = htk_mel_filterbank()
        self.window = torch.hann_window(WIN_LENGTH, periodic=True, dtype=torch.float32, device="cpu")

    @staticmethod
    def frames(samples: int) -> int:
        """Encoder frames of an input of `samples` samples."""
        return samples // SAMPLES_PER_FRAME

    def __call__(self, pcm: torch.Tensor) -> torch.Tensor:
        pcm = torch.as_tensor(pcm, dtype=torch.float32).reshape(-1)
        t = self.frames(pcm.numel())
        if t == 0:
            return pcm.new_zeros(0, 2 * N_MELS)
        spec = torch.stft(pcm, N_FFT, hop_length=HOP, win_length=WIN_LENGTH, window=self.window, center=True,
                          pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
        power = spec[:, : 2 * t].abs().pow(2.0)  # [n_freqs, 2T]
        mel = power.transpose(0, 1) @ self.filters  # [2T, 80]
        logmel = mel.clamp_min(1e-10).log10()
        logmel = torch.maximum(logmel, logmel.max() - 8.0) / 4.0 + 1.0
        return logmel.reshape(t, 2 * N_MELS)
