"""The streaming Sortformer's chunk loop, over features that come in pieces (a file read block by block, or a
live stream), as NeMo's `forward_streaming` runs it over the features of a whole clip.

NeMo cuts the features into chunks of `chunk_len` frames (x `subsampling_factor` mel frames) with
`chunk_left_context` frames before (none for the first chunk) and `chunk_right_context` after (fewer at the end);
each chunk is pre-encoded, put after the speaker cache and the FIFO, run through the network, and its frames'
predictions kept (`cache.py` updates the state). `ChunkLoop.push` runs every chunk whose right context has
arrived, so the predictions of a stream fed piece by piece are those of the whole clip.

`Features` makes the mel frames piece by piece from the samples (`nemo.live_features`: bit-equal to the
whole-signal front end) and normalizes them: a front end with `normalize: NA` (the published streaming models)
needs nothing more; `per_feature` normalization needs each mel band's mean and deviation over the whole clip:
for a file, a first pass over the samples gathers them (float64 sums), so the frames are NeMo's within float32
rounding; for a live stream they are unknown, and the statistics of the frames so far stand in (a live stream's
predictions then differ from a file's: published models do not normalize).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

import numpy as np
import torch

from ..nemo.frontend import NemoMelFrontEnd
from ..nemo.live_features import LiveMelFeatures
from .cache import AsyncCache, SyncCache

_STD_EPS = 1e-5  # NeMo adds it to the standard deviation
BLOCK = 16000 * 30  # samples per front-end block of a file


class ChunkLoop:
    """NeMo's streaming loop for one stream: `push(feats)` ([n_mels, k] normalized mel frames) -> the
    predictions [m, n_spk] of the chunks that completed; `finish()` -> the rest. `trace` records each chunk
    (feature frames, left and right offsets, cache and FIFO lengths before and after)."""

    def __init__(self, model, async_update: bool = False, geometry=None):
        self.model = model
        self.g = geometry if geometry is not None else model.config.streaming
        self.f = model.subsampling_factor
        cls = AsyncCache if async_update else SyncCache
        self.cache = cls(self.g, model.n_spk, model.config.fc_d_model)
        self.buf = torch.zeros(model.preprocessor.n_mels, 0)
        self.buf_start = 0   # absolute index of buf's first frame
        self.start = 0       # absolute index of the next chunk's first frame
        self.total = 0       # frames received
        self.frames_out = 0  # prediction frames given
        self.trace: list[dict] = []
        self.finished = False

    def push(self, feats: torch.Tensor) -> torch.Tensor:
        if self.finished:
            raise RuntimeError("push after finish")
        if feats.shape[1]:
            self.buf = torch.cat([self.buf, feats.float()], dim=1)
            self.total += feats.shape[1]
        out = []
        step, right = self.g.chunk_len * self.f, self.g.chunk_right_context * self.f
        while self.total >= self.start + step + right and (self.total > self.start + step or right == 0):
            out.append(self._chunk(self.start + step, right))
        return self._cat(out)

    def finish(self) -> torch.Tensor:
        if self.finished:
            raise RuntimeError("finish called twice")
        self.finished = True
        out = []
        step, rc = self.g.chunk_len * self.f, self.g.chunk_right_context * self.f
        while self.start < self.total:
            end = min(self.start + step, self.total)
            out.append(self._chunk(end, min(rc, self.total - end)))
        return self._cat(out)

    def _cat(self, out: list) -> torch.Tensor:
        if not out:
            return torch.zeros(0, self.model.n_spk)
        return torch.cat(out, dim=0)

    def _chunk(self, end: int, right: int) -> torch.Tensor:
        g, f, model = self.g, self.f, self.model
        left = min(g.chunk_left_context * f, self.start)
        lo = self.start - left - self.buf_start
        feats = self.buf[:, lo:end + right - self.buf_start]
        embs = model.pre_encode(feats).float()[None]
        lc, rc = round(left / f), math.ceil(right / f)
        before = self.cache.lengths
        preds = model.predict(torch.cat([self.cache.context(), embs], dim=1)[0])[None]
        chunk_preds = self.cache.update(embs, preds, lc, rc)[0]
        self.trace.append({"feat_frames": int(feats.shape[1]), "left_offset": left, "right_offset": right,
                           "before": list(before), "after": list(self.cache.lengths)})
        self.start = end
        keep = self.start - g.chunk_left_context * f  # what the next chunk's left context needs
        if keep > self.buf_start:
            self.buf = self.buf[:, keep - self.buf_start:].clone()
            self.buf_start = keep
        self.frames_out += chunk_preds.shape[0]
        return chunk_preds


class Features:
    """Normalized mel frames of one stream, piece by piece. `stats`: (mean, std) per band for `per_feature`
    normalization (a file's, from `file_stats`), or None: a live stream's running statistics."""

    def __init__(self, frontend: NemoMelFrontEnd, stats: Optional[tuple] = None):
        self.norm = frontend.normalize
        if self.norm not in (None, "per_feature", "all_features"):
            raise ValueError(f"normalize = {self.norm!r} is not implemented for streaming")
        self.live = LiveMelFeatures(frontend if self.norm is None else _plain(frontend))
        self.stats = stats
        self._running = _Moments(frontend)

    def push(self, pcm) -> torch.Tensor:
        return self._normalize(self.live.push(pcm))

    def finish(self) -> torch.Tensor:
        return self._normalize(self.live.finish())

    def _normalize(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm is None or x.shape[1] == 0:
            return x
        if self.stats is None:  # live: the statistics of the frames so far
            self._running.add(x)
            mean, std = self._running.mean_std()
        else:
            mean, std = self.stats
        mean = torch.as_tensor(np.asarray(mean, dtype=np.float32)).reshape(-1, 1)
        std = torch.as_tensor(np.asarray(std, dtype=np.float32)).reshape(-1, 1)
        return (x - mean) / std


class _Moments:
    """Sums (float64) of mel frames and of their squares, per band (`per_feature`) or over all (`all_features`),
    and NeMo's statistics from them: the mean and the standard deviation (n - 1 in the denominator) + 1e-5."""

    def __init__(self, frontend: NemoMelFrontEnd):
        self.per = frontend.normalize == "per_feature"
        self.sum = np.zeros(frontend.n_mels if self.per else 1)
        self.sq = np.zeros_like(self.sum)
        self.n = 0

    def add(self, x: torch.Tensor) -> None:
        xd = x.double().numpy()
        axis = 1 if self.per else None
        self.sum += xd.sum(axis=axis)
        self.sq += (xd * xd).sum(axis=axis)
        self.n += x.shape[1] * (1 if self.per else x.shape[0])

    def mean_std(self) -> tuple:
        n = self.n
        mean = self.sum / max(n, 1)
        var = (self.sq - n * mean * mean) / (n - 1) if n > 1 else np.full_like(self.sum, np.nan)
        std = np.sqrt(np.maximum(var, 0.0))
        return mean, np.where(np.isnan(std), 0.0, std) + _STD_EPS


def _plain(frontend: NemoMelFrontEnd) -> NemoMelFrontEnd:
    fe = NemoMelFrontEnd(replace(frontend.config, normalize="NA"))
    fe.window, fe.fb = frontend.window, frontend.fb
    return fe


def file_stats(frontend: NemoMelFrontEnd, audio: np.ndarray) -> Optional[tuple]:
    """A file's normalization statistics (NeMo's), gathered block by block in a first pass over its samples;
    None when the front end does not normalize."""
    if frontend.normalize is None:
        return None
    live = LiveMelFeatures(_plain(frontend))
    moments = _Moments(frontend)
    for i in range(0, len(audio), BLOCK):
        moments.add(live.push(audio[i:i + BLOCK]))
    moments.add(live.finish())
    return moments.mean_std()
