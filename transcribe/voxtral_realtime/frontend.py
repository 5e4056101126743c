"""Voxtral Realtime's front end: transformers' `VoxtralRealtimeFeatureExtractor` with the padding its processor
adds (mistral-common's streaming layout), for a whole input and for a live stream.

The log-mel: a periodic Hann window of n_fft, the STFT with hop 160, the last frame dropped, the power spectrum
through Slaney mel filters (0-8 kHz), log10 floored at 1e-10, then at a FIXED maximum minus 8
(`global_log_mel_max` 1.5: the floor is -6.5, the same for every input and every chunk), and (x + 4) / 4.

Both paths see the same padded signal: the left padding's silence (left-pad tokens x 1280 samples) before the
audio. Mel frame t is the window centred on sample t * hop of that signal (what the processor's centred STFT
gives away from the signal's ends, and what its streaming chunks give with `center=False`):

- offline (`whole`): the processor pads the audio on the right to whole tokens plus delay + 1 + 10 tokens of
  silence and takes the centred STFT of everything (the last frames reflect the padding's zeros);
- streaming (`StreamMel`): the frames come out as the samples covering them arrive, in groups of one token's
  frames; the first group is the prompt's (left pad + delay + 1 tokens), as transformers' streaming example cuts
  the first chunk; each later group waits for 160 samples beyond its last window (that chunk's ninth frame,
  which the processor computes and drops), as the example's chunks of 8 * 160 + 400 samples do."""
from __future__ import annotations

import numpy as np
import torch

from ..mel import mel_filterbank
from .config import FeatureConfig, StreamLayout


class LogMel:
    def __init__(self, cfg: FeatureConfig):
        self.cfg = cfg
        self.filters = mel_filterbank(cfg.sample_rate, cfg.n_fft, cfg.n_mels, 0.0, 8000.0)
        self.window = torch.hann_window(cfg.n_fft, periodic=True)

    def _log(self, power: torch.Tensor) -> torch.Tensor:
        log_spec = torch.clamp(self.filters @ power, min=1e-10).log10()
        peak = self.cfg.log_mel_max
        return (torch.maximum(log_spec, torch.tensor(peak - 8.0)) + 4.0) / 4.0

    @torch.no_grad()
    def centred(self, x: torch.Tensor) -> torch.Tensor:
        """The processor's features of a whole padded signal [samples]: [n_mels, samples // hop]."""
        c = self.cfg
        spec = torch.stft(x, c.n_fft, c.hop, window=self.window, center=True, pad_mode="reflect", return_complex=True)
        return self._log(spec[..., :-1].abs() ** 2)

    @torch.no_grad()
    def windows(self, x: torch.Tensor, frames: int) -> torch.Tensor:
        """`frames` frames of the uncentred STFT of x (frame i: samples i * hop .. i * hop + n_fft): [n_mels,
        frames]. x holds at least (frames - 1) * hop + n_fft samples."""
        c = self.cfg
        need = (frames - 1) * c.hop + c.n_fft
        spec = torch.stft(x[:need], c.n_fft, c.hop, window=self.window, center=False, return_complex=True)
        return self._log(spec.abs() ** 2)


def offline_samples(layout: StreamLayout, samples: int, delay_ms: float) -> tuple[int, int]:
    """(left, right) padding in samples mistral-common's OFFLINE streaming request adds to an input of `samples`."""
    per = layout.samples_per_token
    right = (per - samples % per) % per + per * layout.right_pad_tokens(delay_ms)
    return per * layout.left_pad_tokens, right


def whole(mel: LogMel, layout: StreamLayout, pcm: np.ndarray, delay_ms: float) -> torch.Tensor:
    """The features transformers' processor gives a whole input (an offline request): [n_mels, frames], frames a
    multiple of the frames per token."""
    left, right = offline_samples(layout, len(pcm), delay_ms)
    x = torch.from_numpy(np.concatenate([np.zeros(left, np.float32), np.asarray(pcm, np.float32),
                                         np.zeros(right, np.float32)]))
    return mel.centred(x)


class StreamMel:
    """Mel frames of a live stream, one token's group at a time (see the module docstring). `feed` appends samples;
    `take(final)` returns the groups now complete ([n_mels, 8 * k], k >= 0): the prompt's group first. The samples
    no future frame reads are dropped, so the memory held is a few windows whatever the length."""

    def __init__(self, mel: LogMel, layout: StreamLayout, prompt_tokens: int):
        self.mel = mel
        self.hop = mel.cfg.hop
        self.n_fft = mel.cfg.n_fft
        self.per = layout.frames_per_token
        self.prompt_frames = prompt_tokens * self.per
        self.left = layout.samples_per_token * layout.left_pad_tokens
        self.reset()

    def reset(self) -> None:
        # the signal from absolute sample `base` on (the left padding's silence counts from sample 0)
        self.buf = np.zeros(self.left, np.float32)
        self.base = 0
        self.next_frame = 0       # the next frame to compute
        self.total = self.left    # samples of the padded signal so far

    def feed(self, pcm: np.ndarray) -> None:
        if len(pcm):
            self.buf = np.concatenate([self.buf, np.asarray(pcm, np.float32)])
            self.total += len(pcm)

    def _ready(self, frames: int, final_total: int | None) -> bool:
        """Whether the group ending before frame `frames` may be computed now (the example's chunk rule)."""
        last = frames - 1
        if self.next_frame == 0:
            end = last * self.hop + self.n_fft // 2   # the first chunk: up to the prompt's last window
            return end <= (self.total if final_total is None else final_total)
        end = (last + 1) * self.hop + self.n_fft // 2  # one more hop: the chunk's dropped ninth frame
        return end <= self.total if final_total is None else end < final_total

    def take(self, final_total: int | None = None) -> torch.Tensor:
        """The complete groups (final_total: the padded signal's length at the end of the stream, whose last
        group needs its end strictly inside, as transformers' streaming example loops)."""
        out = []
        while True:
            count = self.prompt_frames if self.next_frame == 0 else self.per
            if not self._ready(self.next_frame + count, final_total):
                break
            first = self.next_frame
            need_end = (first + count - 1) * self.hop + self.n_fft // 2
            if first == 0:
                # the processor's first chunk: the centred STFT of the signal so far (reflect padding on the left)
                x = torch.from_numpy(self._slice(0, need_end))
                out.append(self.mel.centred(x)[:, :count])
            else:
                x = self._slice(first * self.hop - self.n_fft // 2, need_end)
                out.append(self.mel.windows(torch.from_numpy(x), count))
            self.next_frame += count
            self._drop(self.next_frame * self.hop - self.n_fft // 2)
        if not out:
            return torch.zeros(self.mel.cfg.n_mels, 0)
        return torch.cat(out, dim=1)

    def _slice(self, start: int, end: int) -> np.ndarray:
        """Samples [start, end) of the padded signal (all of them came and were kept)."""
        return self.buf[start - self.base:end - self.base]

    def _drop(self, keep_from: int) -> None:
        if keep_from > self.base + 4 * self.n_fft:
            cut = keep_from - self.base
            self.buf = self.buf[cut:]
            self.base = keep_from
