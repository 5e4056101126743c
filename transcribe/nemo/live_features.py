"""Live log-mel features: `NemoMelFrontEnd`'s frames computed as audio arrives, piece by piece.

`LiveMelFeatures` takes 16 kHz mono samples in pieces of any size and returns each feature frame as
soon as every sample it depends on has arrived. All the frames of a stream, concatenated, are the
valid frames the whole-signal front end gives for the whole stream (``frontend(audio[None],
lengths)``, its first ``lengths`` frames), bit for bit: each frame's STFT is computed from exactly
the samples (and zero padding) the whole-signal STFT uses for it, with the same window, FFT size and
the same float32 operations after it.

What the whole-signal front end does, and how it is followed here (s is the STFT's input):

- pre-emphasis y[0] = x[0], y[i] = x[i] - a * x[i-1]: the last sample of a piece is kept for the
  next one, so y is known as soon as x is;
- centred STFT (``exact_pad=False``): s is y with n_fft // 2 zeros on each side (torch.stft's
  ``pad_mode="constant"``, not reflection), so the first frames need only the start of the stream
  and the zeros before it;
- ``exact_pad=True``: s is y with (n_fft - hop) // 2 zeros on each side and an uncentred STFT, and,
  when pre-emphasis is on, every s[q] with q >= L (the stream's length) set to zero, as the batch
  mask in NeMo's featurizer does in padded coordinates (the last (n_fft - hop) // 2 samples of the
  stream do not reach the features). A frame is final here once its samples lie below the length
  received so far, since they can no longer be masked;
- of the STFT's frames the valid ones are the first ``(L + 2 * pad - n_fft) // hop`` (0 for L = 0):
  the last STFT frame is never valid, so a frame is final only once that many samples make it valid,
  whatever the stream's final length.

Per-feature or all-feature normalization uses statistics of the whole utterance and cannot be
computed live: a front end that normalizes is refused (cache-aware streaming models use
``normalize: NA``). Masking and ``pad_to`` pad a batch and are not part of the frames.

The float32 operations after the STFT are the front end's own (`NemoMelFrontEnd.log_mel`), chosen
so that a frame's features do not depend on how many frames are computed together: the mel
projection is a fixed-order banded sum rather than a matrix product (whose sums follow the BLAS
kernel picked for the shape and the CPU: a few columns and many differ in the last bits on some
CPUs) and the log is taken in float64 and rounded once. What is left to the libraries is the FFT of
each frame, which the FFT library computes frame by frame the same way for any number of frames on
the CPUs tested (tests/test_live_features.py checks the frames against the whole signal).
"""
from __future__ import annotations

import numpy as np
import torch

from .frontend import NemoMelFrontEnd

__all__ = ["LiveMelFeatures"]


class LiveMelFeatures:
    """Incremental log-mel features of one stream, equal to `frontend`'s whole-signal features.

    ``push(pcm)`` takes the next samples (1-D, any length, float32 numpy array or torch tensor)
    and returns the frames that became final, [n_mels, k] float32 on the front end's device;
    ``finish()`` returns the rest, computed with the end-of-stream padding. ``reset()`` starts a new
    stream. Only the samples later frames still need are held (about one window plus one hop).
    """

    def __init__(self, frontend: NemoMelFrontEnd):
        if not isinstance(frontend, NemoMelFrontEnd):
            raise TypeError(f"LiveMelFeatures needs a NemoMelFrontEnd, got {type(frontend).__name__}")
        if frontend.normalize is not None:
            raise ValueError(
                f"live features need a front end without whole-utterance normalization, but this one has "
                f"normalize = {frontend.normalize!r} (its statistics need the whole stream); cache-aware "
                "streaming models use normalize: NA")
        # NemoMelFrontEnd itself implements frame_splicing = 1 only, the slaney mel norm and NeMo's own
        # STFT (every other setting is refused when it is built); every setting it has is followed here.
        self.frontend = frontend
        self.n_fft = frontend.n_fft
        self.hop = frontend.hop_length
        self.n_mels = frontend.n_mels
        if frontend.exact_pad:
            self._pad = (self.n_fft - self.hop) // 2
            self._mask_end = frontend.preemph is not None
        else:
            self._pad = self.n_fft // 2
            self._mask_end = False
        self.reset()

    # -- state ------------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the stream; the next push starts a new one."""
        self._samples = 0  # samples received
        self._frames = 0  # frames returned
        self._prev = None  # last sample received (the pre-emphasis's x[i-1]), a 1-element tensor
        self._finished = False
        # s[_start:] as far as it is known: the leading zero padding until samples come.
        self._start = 0
        self._buf = torch.zeros(self._pad, dtype=torch.float32, device=self._device())

    @property
    def samples(self) -> int:
        """Samples received since the start (or the last reset)."""
        return self._samples

    @property
    def frames(self) -> int:
        """Frames returned since the start (or the last reset)."""
        return self._frames

    @property
    def held(self) -> int:
        """Values held back for the frames not returned yet (STFT input samples, padding included)."""
        return int(self._buf.numel())

    @property
    def finished(self) -> bool:
        return self._finished

    # -- stream -----------------------------------------------------------------------------------

    def push(self, pcm) -> torch.Tensor:
        """Take the next samples; return the frames now final, [n_mels, k] (k may be 0)."""
        if self._finished:
            raise RuntimeError("LiveMelFeatures.push after finish(): the stream has ended; call reset() to start another")
        x = self._as_samples(pcm)
        if x.numel():
            self._append(x)
        return self._emit(self._final_frames())

    def finish(self) -> torch.Tensor:
        """End the stream: the remaining frames, [n_mels, k], with the end-of-signal padding."""
        if self._finished:
            raise RuntimeError("LiveMelFeatures.finish called twice; call reset() to start another stream")
        self._finished = True
        n = self._samples
        total = self._valid_frames(n)
        if total <= self._frames:
            # (With exact_pad a stream shorter than n_fft - 2 * pad has no valid frame; the whole-signal
            # STFT refuses such an input, and no frames is what its frame count says.)
            return self._empty()
        # The right padding, then (exact_pad with pre-emphasis) the mask of s[q >= n].
        end = (total - 1) * self.hop + self.n_fft
        need = end - self._start - self._buf.numel()
        if need > 0:
            self._buf = torch.cat([self._buf, self._buf.new_zeros(need)])
        if self._mask_end and n - self._start < self._buf.numel():
            self._buf[max(n - self._start, 0):] = 0.0
        return self._emit(total)

    # -- internals --------------------------------------------------------------------------------

    def _device(self) -> torch.device:
        return self.frontend.window.device

    def _empty(self) -> torch.Tensor:
        return torch.zeros(self.n_mels, 0, dtype=torch.float32, device=self._device())

    def _as_samples(self, pcm) -> torch.Tensor:
        if isinstance(pcm, torch.Tensor):
            x = pcm.detach()
        else:
            x = torch.from_numpy(np.array(pcm, copy=True))
        if x.ndim != 1:
            raise ValueError(f"LiveMelFeatures.push takes 1-D mono samples, got shape {tuple(x.shape)}")
        # As the front end does (audio.float()), in float32 before anything else.
        return x.to(device=self._device(), dtype=torch.float32)

    def _append(self, x: torch.Tensor) -> None:
        a = self.frontend.preemph
        if a is not None:
            # The front end's expression, x[1:] - a * x[:-1], over the previous sample and this piece;
            # the stream's first sample is kept as it is.
            if self._prev is None:
                y = torch.cat([x[:1], x[1:] - a * x[:-1]])
            else:
                y = x - a * torch.cat([self._prev, x[:-1]])
            self._prev = x[-1:].clone()
        else:
            y = x
        self._buf = torch.cat([self._buf, y])
        self._samples += x.numel()

    def _valid_frames(self, n: int) -> int:
        """The whole-signal front end's frame count for n samples (`output_lengths`)."""
        if n == 0:
            return 0
        return max((n + 2 * self._pad - self.n_fft) // self.hop, 0)

    def _final_frames(self) -> int:
        """How many frames are final with the samples received so far."""
        n = self._samples
        if n == 0:
            return 0
        # s is known below `known` whatever comes next: the left padding and the samples received
        # (with the end mask, only below n, as s[q >= final length] is zeroed).
        known = n if self._mask_end else self._pad + n
        if known < self.n_fft:
            return 0
        return min((known - self.n_fft) // self.hop + 1, self._valid_frames(n))

    def _emit(self, upto: int) -> torch.Tensor:
        k = upto - self._frames
        if k <= 0:
            return self._empty()
        # Frame t covers s[t * hop, t * hop + n_fft); the buffer starts at frame _frames.
        seg = self._buf[: (k - 1) * self.hop + self.n_fft]
        out = self._mel(seg, k)
        self._frames = upto
        new_start = upto * self.hop
        # Keep only what later frames need (a copy, so a long piece's storage is let go).
        self._buf = self._buf[new_start - self._start:].clone()
        self._start = new_start
        return out

    def _mel(self, seg: torch.Tensor, k: int) -> torch.Tensor:
        """Log-mel of the k frames of seg: the STFT as the whole-signal front end takes it, then its own
        operations after the STFT (`log_mel`)."""
        fe = self.frontend
        spec = torch.stft(
            seg[None],
            n_fft=self.n_fft,
            hop_length=self.hop,
            win_length=fe.win_length,
            window=fe.window.float(),
            center=False,
            return_complex=True,
        )
        return fe.log_mel(spec)[0, :, :k].contiguous()
