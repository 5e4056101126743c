"""Voxtral's front end: the audio zero-padded to whole 30 s chunks (as mistral-common's audio encoder pads it), then
transformers' `WhisperFeatureExtractor` over the whole padded input (Whisper's log-mel, `mel.clamped_log_mel`: its
floor 8 below the maximum of all chunks together), cut into chunks of 3000 frames, one encoder input each."""
from __future__ import annotations

import numpy as np
import torch

from ..mel import clamped_log_mel, mel_filterbank
from .config import FeatureConfig


class LogMel:
    def __init__(self, cfg: FeatureConfig):
        self.cfg = cfg
        self.filters = mel_filterbank(cfg.sample_rate, cfg.n_fft, cfg.n_mels)

    def n_chunks(self, samples: int) -> int:
        return -(-samples // self.cfg.chunk_samples)

    @torch.no_grad()
    def chunks(self, pcm: np.ndarray) -> torch.Tensor:
        """One mono float32 input (at least one sample) -> float32 [C, n_mels, chunk_frames]."""
        c = self.cfg
        x = torch.as_tensor(np.asarray(pcm, dtype=np.float32))
        if x.dim() != 1 or x.shape[0] == 0:
            raise ValueError(f"audio must be one channel with samples, got shape {tuple(x.shape)}")
        n = self.n_chunks(x.shape[0])
        x = torch.nn.functional.pad(x, (0, n * c.chunk_samples - x.shape[0]))
        mel = clamped_log_mel(x, self.filters, c.n_fft, c.hop)  # [n_mels, n * chunk_frames]
        return mel.reshape(c.n_mels, n, c.chunk_frames).transpose(0, 1).contiguous()
