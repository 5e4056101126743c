"""Mel filterbanks shared by the front ends: the Slaney bank (librosa's default: Whisper, Parakeet, Qwen3-ASR)
and the HTK-scale bank without normalization (torchaudio's default: both Granite Speech families); and
Whisper's clamped log-mel, which Qwen3-ASR's front end computes too."""
from __future__ import annotations

import math
from typing import Optional

import torch


def _hz_to_mel_slaney(f: torch.Tensor) -> torch.Tensor:
    # Slaney's auditory toolbox scale: linear below 1 kHz, logarithmic above.
    f_sp = 200.0 / 3
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = math.log(6.4) / 27.0
    lin = f / f_sp
    log = min_log_mel + torch.log(torch.clamp(f, min=1e-10) / min_log_hz) / logstep
    return torch.where(f >= min_log_hz, log, lin)


def _mel_to_hz_slaney(m: torch.Tensor) -> torch.Tensor:
    f_sp = 200.0 / 3
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = math.log(6.4) / 27.0
    lin = f_sp * m
    log = min_log_hz * torch.exp(logstep * (m - min_log_mel))
    return torch.where(m >= min_log_mel, log, lin)


def mel_filterbank(
    sample_rate: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: Optional[float] = None
) -> torch.Tensor:
    """Triangular mel filters on the Slaney scale with Slaney area normalization: [n_mels, n_fft//2+1].

    The same filters librosa builds with its defaults (htk=False, norm="slaney"), computed in float64.
    """
    fmax = sample_rate / 2 if fmax is None else fmax
    n_freqs = n_fft // 2 + 1
    cpu = dict(dtype=torch.float64, device="cpu")  # real numbers even under a meta default device
    fft_freqs = torch.linspace(0, sample_rate / 2, n_freqs, **cpu)
    mel_pts = torch.linspace(
        float(_hz_to_mel_slaney(torch.tensor(float(fmin), **cpu))),
        float(_hz_to_mel_slaney(torch.tensor(float(fmax), **cpu))),
        n_mels + 2,
        **cpu,
    )
    hz_pts = _mel_to_hz_slaney(mel_pts)
    widths = hz_pts[1:] - hz_pts[:-1]
    ramps = hz_pts[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = torch.clamp(torch.minimum(lower, upper), min=0.0)
    enorm = 2.0 / (hz_pts[2 : n_mels + 2] - hz_pts[:n_mels])
    return (weights * enorm[:, None]).to(torch.float32)


def _hz_to_mel_htk(f: float) -> float:
    return 2595.0 * math.log10(1.0 + f / 700.0)


def htk_mel_filterbank(sample_rate: int, n_fft: int, n_mels: int) -> torch.Tensor:
    """Triangular filters on the HTK mel scale, no area normalization: [n_fft//2+1, n_mels]
    (torchaudio's melscale_fbanks(norm=None, mel_scale="htk") layout), computed in float64."""
    cpu = dict(dtype=torch.float64, device="cpu")
    n_freqs = n_fft // 2 + 1
    freqs = torch.linspace(0, sample_rate // 2, n_freqs, **cpu)
    mels = torch.linspace(_hz_to_mel_htk(0.0), _hz_to_mel_htk(sample_rate / 2), n_mels + 2, **cpu)
    hz = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    widths = hz[1:] - hz[:-1]
    ramps = hz[None, :] - freqs[:, None]  # [n_freqs, n_mels + 2]
    down = -ramps[:, :-2] / widths[:-1]
    up = ramps[:, 2:] / widths[1:]
    return torch.clamp(torch.minimum(down, up), min=0.0).to(torch.float32)


def clamped_log_mel(x: torch.Tensor, filters: torch.Tensor, n_fft: int, hop: int) -> torch.Tensor:
    """Whisper's log-mel, which Qwen3-ASR's front end computes too: a periodic Hann window of n_fft, a centred
    STFT with reflect padding, the last frame dropped, the power spectrum through `filters` [n_mels, F], log10
    floored at 1e-10, then at the input's maximum minus 8 (per item of a batch [B, samples]), and (x + 4) / 4:
    float32 [n_mels, samples // hop] (or [B, n_mels, T])."""
    window = torch.hann_window(n_fft, periodic=True, device=x.device)
    spec = torch.stft(x, n_fft, hop, window=window, center=True, pad_mode="reflect", return_complex=True)
    power = spec[..., :-1].abs().pow(2)
    log_spec = torch.clamp(filters.to(x.device) @ power, min=1e-10).log10()
    peak = log_spec.amax(dim=(-2, -1), keepdim=True)
    return (torch.maximum(log_spec, peak - 8.0) + 4.0) / 4.0
