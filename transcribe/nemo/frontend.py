"""NeMo's front end: audio samples -> log-mel features, checked against NeMo.

`NemoMelFrontEnd` is NeMo's `AudioToMelSpectrogramPreprocessor` as it runs at inference (no dither,
no augmentation): pre-emphasis, centred STFT, power spectrum, mel filterbank, log with an additive
zero guard, per-feature normalization over the valid frames, masking and `pad_to`.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..mel import mel_filterbank
from .config import FrontEndConfig

_WINDOWS = {
    "hann": torch.hann_window,
    "hamming": torch.hamming_window,
    "blackman": torch.blackman_window,
    "bartlett": torch.bartlett_window,
}

# Added to the per-feature standard deviation, as NeMo does.
_STD_EPS = 1e-5


class NemoMelFrontEnd(nn.Module):
    """NeMo's log-mel front end, built from a `FrontEndConfig` (the `preprocessor` section). Input
    [B, samples] and lengths; output [B, n_mels, T] and lengths."""

    def __init__(self, config: FrontEndConfig = FrontEndConfig()):
        # `config` holds NeMo's settings, checked (nemo/config.py); settings that do not change
        # inference are dropped (`config.HARMLESS_KEYS`), any other is an
        # error there.
        super().__init__()
        self.config = config
        sample_rate = config.sample_rate
        self.sample_rate = int(sample_rate)
        self.win_length = int(config.n_window_size or round(config.window_size * sample_rate))
        self.hop_length = int(config.n_window_stride or round(config.window_stride * sample_rate))
        self.n_fft = int(config.n_fft or 2 ** math.ceil(math.log2(self.win_length)))
        self.exact_pad = bool(config.exact_pad)
        self.normalize = config.normalization
        self.preemph = config.preemph
        self.log = config.log
        self.log_zero_guard_type = config.log_zero_guard_type
        self.log_zero_guard_value = config.log_zero_guard_value
        self.pad_to = config.pad_frames
        self.pad_value = float(config.pad_value)
        self.mag_power = float(config.mag_power)
        self.n_mels = int(config.features)
        win_fn = _WINDOWS[config.window]
        # Computed on the CPU even while a model is built on the meta device (where these ops run
        # through torch's Python decompositions and import torch._dynamo, over a second).
        with torch.device("cpu"):
            self.register_buffer("window", win_fn(self.win_length, periodic=False), persistent=True)
            fb = mel_filterbank(self.sample_rate, self.n_fft, self.n_mels, config.lowfreq, config.highfreq)
        self.register_buffer("fb", fb.unsqueeze(0), persistent=True)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Number of valid frames for a given number of samples."""
        pad = (self.n_fft - self.hop_length) // 2 * 2 if self.exact_pad else self.n_fft // 2 * 2
        out = torch.div(lengths + pad - self.n_fft, self.hop_length, rounding_mode="floor")
        return torch.where(lengths == 0, torch.zeros_like(out), out).long()

    def _guard(self, x: torch.Tensor) -> float:
        v = self.log_zero_guard_value
        if isinstance(v, str):
            if v == "tiny":
                return torch.finfo(x.dtype).tiny
            if v == "eps":
                return torch.finfo(x.dtype).eps
            raise ValueError(f"unknown log_zero_guard_value {v!r}")
        return float(v)

    def log_mel(self, spec: torch.Tensor) -> torch.Tensor:
        """The STFT's complex frames [..., n_freq, T] -> (log) mel features [..., n_mels, T] in float32.

        Each frame's features depend on that frame's spectrum alone, through operations whose
        results do not depend on how many frames are computed together or on the CPU's code path:
        the magnitude (exact IEEE operations), the mel projection as a fixed-order banded sum (see
        `_project`), and the logarithm computed in float64 and rounded once to float32. So the live
        front end (live_features.py), which computes a few frames at a time, gets the same bits as
        the whole signal; a batch gets what each input gets alone. Against NeMo's float32 matrix
        product and float32 log the values move within float32 rounding (the parity tests' bounds).
        """
        mag = torch.view_as_real(spec).pow(2).sum(-1).sqrt()
        if self.mag_power != 1.0:
            mag = mag.pow(self.mag_power)
        x = self._project(mag)
        if self.log:
            g = self._guard(x)
            x = x + g if self.log_zero_guard_type == "add" else torch.clamp(x, min=g)
            x = torch.log(x.double()).float()
        return x

    def _bands(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The filterbank as bands: for each mel band, the FFT bins from its first to its last
        non-zero weight. Returns (bins [W, n_mels] long, weights [W, n_mels, 1] float32), W the widest
        band (narrower bands padded with weight 0 on bin 0). Rebuilt when `fb` is another tensor (moved
        to a device) or is loaded (a checkpoint's or GGUF file's filterbank replaces the computed one)."""
        fb = self.fb
        key = (fb.data_ptr(), fb.device, device)
        cached = getattr(self, "_band_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        w = fb.detach().reshape(fb.shape[-2], fb.shape[-1]).float().cpu()
        nz = w != 0
        cols = torch.arange(w.shape[1])
        lo = torch.where(nz, cols, w.shape[1]).amin(dim=1)
        hi = torch.where(nz, cols + 1, 0).amax(dim=1)
        width = (hi - lo).clamp_min(0)  # a band without a non-zero weight: hi 0, lo n_freq
        wmax = max(int(width.max()), 1)
        i = torch.arange(wmax)[:, None]
        inside = i < width[None, :]
        bins = torch.where(inside, lo[None, :] + i, 0)
        weights = torch.where(inside, w[torch.arange(w.shape[0])[None, :], bins], 0.0)
        out = (bins.to(device), weights[..., None].to(device))
        self._band_cache = (key, out)
        return out

    def _load_from_state_dict(self, *args, **kwargs):
        self._band_cache = None  # fb is copied in place: the bands are rebuilt from the loaded values
        return super()._load_from_state_dict(*args, **kwargs)

    def _project(self, mag: torch.Tensor) -> torch.Tensor:
        """mag [..., n_freq, T] -> fb @ mag [..., n_mels, T], summed band by band in a fixed order:
        each output is ((0 + w0 * m0) + w1 * m1) + ... over its band's bins, one multiply and one add
        per step, each rounded as IEEE float32. A matrix product's sums instead depend on the BLAS
        kernel the shape and the CPU pick (one column against many, AVX-512 against AMX), which moves
        the last bits between a live stream's few frames and the whole signal's."""
        bins, weights = self._bands(mag.device)
        acc = None
        for b, w in zip(bins, weights):
            term = mag.index_select(-2, b).mul_(w)
            acc = term if acc is None else acc.add_(term)
        return acc

    @torch.no_grad()
    def forward(self, audio: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        audio = audio.float()
        frames = self.output_lengths(lengths)
        if self.exact_pad:
            p = (self.n_fft - self.hop_length) // 2
            audio = nn.functional.pad(audio, (p, p))
        if self.preemph is not None:
            valid = torch.arange(audio.shape[1], device=audio.device)[None, :] < lengths[:, None]
            audio = torch.cat([audio[:, :1], audio[:, 1:] - self.preemph * audio[:, :-1]], dim=1)
            audio = audio.masked_fill(~valid, 0.0)
        spec = torch.stft(
            audio,
            n_fft=self.n_fft,
            hop_length=self.hop_length,
            win_length=self.win_length,
            window=self.window.float(),
            center=not self.exact_pad,
            pad_mode="constant",
            return_complex=True,
        )
        x = self.log_mel(spec)
        t = torch.arange(x.shape[-1], device=x.device)[None, :]
        valid = t < frames[:, None]
        if self.normalize == "per_feature":
            x = _normalize_per_feature(x, frames, valid)
        elif self.normalize == "all_features":
            x = _normalize_all_features(x, frames, valid)
        elif self.normalize is not None:
            raise ValueError(f"unknown normalize type {self.normalize!r}")
        x = x.masked_fill(~valid[:, None, :], self.pad_value)
        if isinstance(self.pad_to, int) and self.pad_to > 0:
            rem = x.shape[-1] % self.pad_to
            if rem:
                x = nn.functional.pad(x, (0, self.pad_to - rem), value=self.pad_value)
        return x, frames


def _normalize_per_feature(x: torch.Tensor, frames: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    m = valid[:, None, :]
    n = frames.to(x.dtype)[:, None]
    mean = torch.where(m, x, 0.0).sum(-1) / n
    var = torch.where(m, x - mean[..., None], 0.0).pow(2).sum(-1) / (n - 1.0)
    std = var.sqrt()
    std = std.masked_fill(std.isnan(), 0.0) + _STD_EPS
    return (x - mean[..., None]) / std[..., None]


def _normalize_all_features(x: torch.Tensor, frames: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        v = x[i, :, : int(frames[i])]
        out[i] = (x[i] - v.mean()) / (v.std() + _STD_EPS)
    return out
