"""Qwen3-ASR's front end: transformers' `Qwen3ASRFeatureExtractor` as its processor runs it on one input.

16 kHz audio shorter than `min_samples` (0.5 s) is zero-padded to it first, and the padding counts as audio (the
original library's rule, which transformers keeps). Then Whisper's log-mel: a periodic Hann window of 400 samples,
a centred STFT with reflect padding (hop 160), the last frame dropped, the power spectrum, Slaney mel filters
(0-8 kHz), log10 floored at 1e-10, a floor 8 below the input's maximum, and (x + 4) / 4. An input of S samples
gives S // 160 frames, all valid; the mel axis is then padded with 0.0 to a multiple of the encoder's chunk
(2 * n_window frames), as the processor pads a lone input.

Each input is computed alone: transformers pads a batch's shorter inputs with zero samples before the STFT, so
their last frames (and the padding of their last chunk) depend on their neighbours there; here they never do,
and every row equals the processor's result for that input alone. (Whisper's front end is the same function of
its samples; families share no code, so this one holds its own copy of those few lines.)
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..mel import mel_filterbank
from .config import FeatureConfig


class LogMel:
    """Audio arrays -> [n_mels, frames] log-mel features and their valid frame counts."""

    def __init__(self, cfg: FeatureConfig):
        self.cfg = cfg
        self.filters = mel_filterbank(cfg.sample_rate, cfg.n_fft, cfg.n_mels, 0.0, cfg.sample_rate / 2)
        self.window = torch.hann_window(cfg.n_fft, periodic=True)

    def frames(self, samples: int) -> int:
        """Valid mel frames of an input of `samples` samples."""
        return max(samples, self.cfg.min_samples) // self.cfg.hop

    @torch.no_grad()
    def one(self, pcm: np.ndarray | torch.Tensor) -> torch.Tensor:
        """One mono float32 input -> float32 [n_mels, frames] (frames = its valid frames, not yet chunk-padded)."""
        c = self.cfg
        x = torch.as_tensor(np.asarray(pcm, dtype=np.float32) if not torch.is_tensor(pcm) else pcm).float()
        if x.dim() != 1:
            raise ValueError(f"audio must be one channel [samples], got shape {tuple(x.shape)}")
        if x.shape[0] < c.min_samples:
            x = torch.nn.functional.pad(x, (0, c.min_samples - x.shape[0]))
        if x.shape[0] == 0:
            raise ValueError("audio is empty")
        spec = torch.stft(x, c.n_fft, c.hop, window=self.window, center=True, pad_mode="reflect",
                          return_complex=True)
        power = spec[..., :-1].abs() ** 2
        log_spec = torch.clamp(self.filters @ power, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
        return (log_spec + 4.0) / 4.0

    def batch(self, pcms: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs -> (float32 [B, n_mels, T] padded with 0.0 to the longest input's frames rounded up to whole
        chunks, int64 [B] valid frames)."""
        feats = [self.one(p) for p in pcms]
        lengths = torch.tensor([f.shape[-1] for f in feats], dtype=torch.long)
        chunk = self.cfg.chunk_frames
        width = -(-int(lengths.max()) // chunk) * chunk if feats else 0
        out = torch.zeros(len(feats), self.cfg.n_mels, width)
        for i, f in enumerate(feats):
            out[i, :, : f.shape[-1]] = f
        return out, lengths
