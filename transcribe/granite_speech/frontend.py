"""Granite Speech's front end as transformers' `GraniteSpeechFeatureExtractor` computes it: 80 log-mels (HTK
scale, power 2; torchaudio's MelSpectrogram: a centre-padded STFT, n_fft 512, a periodic Hann window of 400
zero-padded to 512, hop 160, reflect padding) for the N // 160 + 1 frames of N samples, log10 of at least
1e-10, floored at the utterance's maximum minus 8 (the maximum over every frame), scaled `/ 4 + 1`; an odd
last frame dropped, then pairs of frames stacked into 160-wide frames every 20 ms: T = (N // 160 + 1) // 2.

(The NAR family's front end, IBM's code, keeps N // 320 frames and takes the maximum over those: one frame
fewer for some lengths, so the two are not the same function.)

The audio tokens of an input: ceil(T / window) windows of `window / downsample_rate` queries each.
"""
from __future__ import annotations

import math

import torch

from ..mel import htk_mel_filterbank

SAMPLE_RATE = 16000
N_FFT = 512
WIN_LENGTH = 400
HOP = 160
N_MELS = 80


def frames(samples: int) -> int:
    """Encoder frames (stacked pairs) of an input of `samples` samples."""
    return (samples // HOP + 1) // 2


def audio_tokens(samples: int, window: int, queries: int) -> int:
    """The projector's outputs (the prompt's audio tokens) for an input of `samples` samples."""
    return math.ceil(frames(samples) / window) * queries


class FrontEnd:
    """pcm (float32, 16 kHz) -> features [T, 160]; stateless, safe to share between threads."""

    sample_rate = SAMPLE_RATE

    def __init__(self):
        self.filters = htk_mel_filterbank(SAMPLE_RATE, N_FFT, N_MELS)
        self.window = torch.hann_window(WIN_LENGTH, periodic=True, dtype=torch.float32, device="cpu")

    def __call__(self, pcm) -> torch.Tensor:
        pcm = torch.as_tensor(pcm, dtype=torch.float32).reshape(-1)
        n = pcm.numel()
        if n <= N_FFT // 2:  # reflect padding needs more samples than half a window
            pcm = torch.cat([pcm, pcm.new_zeros(N_FFT // 2 + 1 - n)])
        spec = torch.stft(pcm, N_FFT, hop_length=HOP, win_length=WIN_LENGTH, window=self.window, center=True,
                          pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
        spec = spec[:, : n // HOP + 1]
        mel = spec.abs().pow(2.0).transpose(0, 1) @ self.filters  # [F, 80]
        logmel = mel.clamp_min(1e-10).log10()
        logmel = torch.maximum(logmel, logmel.max() - 8.0) / 4.0 + 1.0
        t = logmel.shape[0] // 2
        return logmel[: 2 * t].reshape(t, 2 * N_MELS)
