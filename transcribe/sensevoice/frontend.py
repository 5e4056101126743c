"""SenseVoice's front end, as funasr's WavFrontend computes it: Kaldi-style log-mel filterbank (80 bins,
25 ms Hamming windows every 10 ms, frames inside the signal only ("snip edges"), samples scaled to 16-bit
range, DC offset removed, pre-emphasis 0.97, a 512-point power spectrum, Kaldi's mel triangles from 20 Hz
to Nyquist, log floored at float32's epsilon, no dither), then low frame rate stacking (LFR: 7 frames
side by side every 6, the first frame repeated 3 times in front and the last one after) and CMVN
(`(x + shift) * scale` from the model's am.mvn).

The arithmetic is float32, as kaldi-native-fbank's (funasr's fbank without torchaudio); the features agree
with funasr's within the tolerance tests/test_sensevoice.py states."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from ..errors import ModelError

SAMPLE_RATE = 16000
WINDOW = 400      # 25 ms
HOP = 160         # 10 ms
N_FFT = 512       # the window padded to a power of two
PREEMPH = 0.97
LOW_HZ = 20.0
FLOOR = float(np.finfo(np.float32).eps)


def _mel(f):
    return 1127.0 * np.log(1.0 + np.asarray(f, dtype=np.float64) / 700.0)


def kaldi_mel_banks(n_mels: int, rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> torch.Tensor:
    """(n_mels, n_fft // 2 + 1) triangles over the FFT bins in Kaldi's mel scale (1127 ln(1 + f/700)),
    equally spaced from LOW_HZ to Nyquist; the Nyquist bin has no weight (as in Kaldi)."""
    lo, hi = _mel(LOW_HZ), _mel(rate / 2)
    delta = (hi - lo) / (n_mels + 1)
    mel = _mel(np.arange(n_fft // 2) * rate / n_fft)
    left = lo + delta * np.arange(n_mels)[:, None]
    center, right = left + delta, left + 2 * delta
    up = (mel - left) / (center - left)
    down = (right - mel) / (right - center)
    w = np.where((mel > left) & (mel < right), np.where(mel <= center, up, down), 0.0)
    return torch.from_numpy(np.concatenate([w, np.zeros((n_mels, 1))], axis=1)).float()


def read_cmvn(path: Path, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(shift, scale) of a Kaldi nnet CMVN file (am.mvn: the `<LearnRateCoef> 0 [ ... ]` lines after
    `<AddShift>` and `<Rescale>`), each of `dim` values."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: unreadable CMVN file ({e})") from None
    found: dict = {}
    for i, line in enumerate(lines[:-1]):
        head = line.split()[:1]
        if head and head[0] in ("<AddShift>", "<Rescale>") and head[0] not in found:
            nxt = lines[i + 1].split()
            if len(nxt) < 4 or nxt[0] != "<LearnRateCoef>" or nxt[2] != "[" or nxt[-1] != "]":
                raise ModelError(f"{path}: line {i + 2} is not a <LearnRateCoef> 0 [ ... ] line")
            try:
                found[head[0]] = [float(v) for v in nxt[3:-1]]
            except ValueError:
                raise ModelError(f"{path}: line {i + 2} holds a value that is not a number") from None
    if len(found) != 2:
        raise ModelError(f"{path}: a CMVN file needs an <AddShift> and a <Rescale> block")
    shift, scale = (torch.tensor(found[k], dtype=torch.float32) for k in ("<AddShift>", "<Rescale>"))
    if shift.numel() != dim or scale.numel() != dim:
        raise ModelError(f"{path}: CMVN of {shift.numel()}/{scale.numel()} values, the model takes {dim} features")
    if not (torch.isfinite(shift).all() and torch.isfinite(scale).all()):
        raise ModelError(f"{path}: CMVN values that are not finite")
    return shift, scale


class SenseVoiceFrontEnd:
    """pcm (float32, 16 kHz, 1-D) -> (frames, n_mels * lfr_m) float32 features; stateless, so safe to share."""

    def __init__(self, shift: torch.Tensor, scale: torch.Tensor, n_mels: int = 80, lfr_m: int = 7, lfr_n: int = 6):
        self.n_mels, self.lfr_m, self.lfr_n = n_mels, lfr_m, lfr_n
        self.shift, self.scale = shift, scale
        self.banks = kaldi_mel_banks(n_mels)
        n = torch.arange(WINDOW, dtype=torch.float64)  # the window in float64, stored as float32
        self.window = (0.54 - 0.46 * torch.cos(2 * math.pi * n / (WINDOW - 1))).float()

    def fbank(self, pcm: torch.Tensor) -> torch.Tensor:
        """(frames, n_mels) log-mel energies of whole 25 ms windows every 10 ms."""
        x = pcm.to(torch.float32) * 32768.0
        if x.numel() < WINDOW:
            raise ValueError(f"{x.numel()} samples are fewer than one 25 ms window ({WINDOW})")
        frames = x.unfold(0, WINDOW, HOP)
        frames = frames - frames.mean(dim=1, keepdim=True)
        frames = torch.cat([frames[:, :1] * (1 - PREEMPH), frames[:, 1:] - PREEMPH * frames[:, :-1]], dim=1)
        spec = torch.fft.rfft(frames * self.window, n=N_FFT).abs().square()
        return torch.clamp(spec @ self.banks.T, min=FLOOR).log()

    def lfr(self, feats: torch.Tensor) -> torch.Tensor:
        """Low frame rate: row i stacks frames 6i-3 .. 6i+3 (clamped to the first and last frame)."""
        t = feats.shape[0]
        n_out = -(-t // self.lfr_n)
        idx = torch.arange(n_out)[:, None] * self.lfr_n + torch.arange(self.lfr_m)[None, :] - (self.lfr_m - 1) // 2
        return feats[idx.clamp(0, t - 1)].reshape(n_out, -1)

    def __call__(self, pcm: torch.Tensor) -> torch.Tensor:
        x = self.lfr(self.fbank(pcm))
        return (x + self.shift) * self.scale
