"""The streaming Sortformer's state: NeMo's Arrival-Order Speaker Cache (AOSC) and FIFO, updated after every
chunk as NeMo's `SortformerModules` does it, in its two variants.

Each step the network sees `[speaker cache, FIFO, chunk]` (pre-encoder embeddings). The chunk's frames (without
their context frames) join the FIFO; when the FIFO overflows, its oldest frames move into the speaker cache
(and frames whose speaker probabilities sum below `sil_threshold` update the mean silence embedding); when the
cache outgrows `spkcache_len` it is compressed to the frames that best represent each speaker (log-probability
scores, boosts, `spkcache_sil_frames_per_spk` slots per speaker filled with the mean silence embedding).

`SyncCache` is NeMo's `streaming_update` (what its `diarize()` runs by default): the cache holds no predictions
until its first compression, which takes them from that step's output. `AsyncCache` is
`streaming_update_async` (fixed-size, zero-padded buffers with lengths, as NeMo's real-time streaming runs it):
a cached frame keeps the prediction it had when it left the FIFO (NeMo's "already compressed" test is true for
any probability, so its first-compression branch never runs). One stream at a time (batch 1): the tensors keep
NeMo's batch dimension so every reduction (`topk`, sums) runs as NeMo runs it.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from .config import StreamingConfig


class _Cache:
    def __init__(self, geometry: StreamingConfig, n_spk: int, d_model: int, device=None):
        self.g = geometry
        self.n_spk = n_spk
        self.d = d_model
        self.device = device
        self.mean_sil_emb = torch.zeros((1, d_model), device=device)
        self.n_sil_frames = torch.zeros((1,), dtype=torch.long, device=device)

    # -- NeMo's compression (`_compress_spkcache` and its helpers), permute_spk False (eval)
    def _silence_profile(self, embs: torch.Tensor, preds: torch.Tensor) -> None:
        is_sil = preds.sum(dim=2) < self.g.sil_threshold
        count = is_sil.sum(dim=1)
        if not bool((count > 0).any()):
            return
        total = self.mean_sil_emb * self.n_sil_frames.unsqueeze(1) + torch.sum(embs * is_sil.unsqueeze(-1), dim=1)
        self.n_sil_frames = self.n_sil_frames + count
        self.mean_sil_emb = total / torch.clamp(self.n_sil_frames.unsqueeze(1), min=1)

    def _scores(self, preds: torch.Tensor) -> torch.Tensor:
        thr = self.g.pred_score_threshold
        log_p = torch.log(torch.clamp(preds, min=thr))
        log_1p = torch.log(torch.clamp(1.0 - preds, min=thr))
        return log_p - log_1p + log_1p.sum(dim=2).unsqueeze(-1).expand(-1, -1, self.n_spk) - math.log(0.5)

    @staticmethod
    def _boost(scores: torch.Tensor, n: int, scale: float) -> torch.Tensor:
        _, idx = torch.topk(scores, n, dim=1, largest=True, sorted=False)
        b = torch.arange(scores.shape[0]).unsqueeze(1).unsqueeze(2)
        s = torch.arange(scores.shape[2]).unsqueeze(0).unsqueeze(0)
        scores[b, idx, s] -= scale * math.log(0.5)
        return scores

    def compress(self, embs: torch.Tensor, preds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """embs [1, n, d], preds [1, n, n_spk] (n > spkcache_len) -> the cache's spkcache_len frames and their
        predictions: per speaker its best frames in time order, then its silence slots."""
        g, n_spk = self.g, self.n_spk
        _, n_frames, _ = preds.shape
        per_spk = g.spkcache_len // n_spk - g.spkcache_sil_frames_per_spk
        strong = math.floor(per_spk * g.strong_boost_rate)
        weak = math.floor(per_spk * g.weak_boost_rate)
        min_pos = math.floor(per_spk * g.min_pos_scores_rate)

        scores = self._scores(preds)
        is_speech = preds > 0.5
        scores = torch.where(is_speech, scores, torch.tensor(float("-inf")))
        is_pos = scores > 0
        replace = (~is_pos) * is_speech * (is_pos.sum(dim=1).unsqueeze(1) >= min_pos)
        scores = torch.where(replace, torch.tensor(float("-inf")), scores)
        if g.scores_boost_latest > 0:
            scores[:, g.spkcache_len:, :] += g.scores_boost_latest
        scores = self._boost(scores, strong, 2.0)
        scores = self._boost(scores, weak, 1.0)
        if g.spkcache_sil_frames_per_spk > 0:
            pad = torch.full((1, g.spkcache_sil_frames_per_spk, n_spk), float("inf"), device=scores.device)
            scores = torch.cat([scores, pad], dim=1)

        total = scores.shape[1]
        flat = scores.permute(0, 2, 1).reshape(1, -1)
        values, idx = torch.topk(flat, g.spkcache_len, dim=1, sorted=False)
        idx = torch.where(values != float("-inf"), idx, torch.tensor(g.max_index))
        idx, _ = torch.sort(idx, dim=1)
        disabled = idx == g.max_index
        idx = torch.remainder(idx, total)
        disabled += idx >= total - g.spkcache_sil_frames_per_spk
        idx[disabled] = 0

        d = embs.shape[2]
        gathered = torch.gather(embs, 1, idx.unsqueeze(-1).expand(-1, -1, d))
        sil = self.mean_sil_emb.unsqueeze(1).expand(-1, g.spkcache_len, -1)
        gathered = torch.where(disabled.unsqueeze(-1), sil, gathered)
        gp = torch.gather(preds, 1, idx.unsqueeze(-1).expand(-1, -1, n_spk))
        gp = torch.where(disabled.unsqueeze(-1), torch.tensor(0.0), gp)
        return gathered, gp


class SyncCache(_Cache):
    """NeMo's `streaming_update` (synchronous: the buffers are as long as what they hold)."""

    def __init__(self, geometry: StreamingConfig, n_spk: int, d_model: int, device=None):
        super().__init__(geometry, n_spk, d_model, device)
        self.spkcache = torch.zeros((1, 0, d_model), device=device)
        self.spkcache_preds: Optional[torch.Tensor] = None
        self.fifo = torch.zeros((1, 0, d_model), device=device)
        self.fifo_preds: Optional[torch.Tensor] = None

    def context(self) -> torch.Tensor:
        """What precedes the chunk in the network's input: [spkcache, fifo] embeddings [1, n, d]."""
        return torch.cat([self.spkcache, self.fifo], dim=1)

    def update(self, chunk: torch.Tensor, preds: torch.Tensor, lc: int, rc: int) -> torch.Tensor:
        """chunk [1, lc + L + rc, d] (pre-encoder embeddings), preds [1, S + F + lc + L + rc, n_spk] (the network's
        output over [cache, fifo, chunk]) -> the chunk's predictions [1, L, n_spk]; the state moves on."""
        g = self.g
        s_len, f_len, c_len = self.spkcache.shape[1], self.fifo.shape[1], chunk.shape[1] - lc - rc
        fifo_preds = preds[:, s_len:s_len + f_len]
        chunk = chunk[:, lc:c_len + lc]
        chunk_preds = preds[:, s_len + f_len + lc:s_len + f_len + c_len + lc]
        self.fifo = torch.cat([self.fifo, chunk], dim=1)
        self.fifo_preds = torch.cat([fifo_preds, chunk_preds], dim=1)
        if f_len + c_len > g.fifo_len:
            pop = max(g.spkcache_update_period, c_len - g.fifo_len + f_len)
            pop = min(pop, f_len + c_len)
            pop_embs, pop_preds = self.fifo[:, :pop], self.fifo_preds[:, :pop]
            self._silence_profile(pop_embs, pop_preds)
            self.fifo, self.fifo_preds = self.fifo[:, pop:], self.fifo_preds[:, pop:]
            self.spkcache = torch.cat([self.spkcache, pop_embs], dim=1)
            if self.spkcache_preds is not None:
                self.spkcache_preds = torch.cat([self.spkcache_preds, pop_preds], dim=1)
            if self.spkcache.shape[1] > g.spkcache_len:
                if self.spkcache_preds is None:  # the first compression: the cache's predictions of this step
                    self.spkcache_preds = torch.cat([preds[:, :s_len], pop_preds], dim=1)
                self.spkcache, self.spkcache_preds = self.compress(self.spkcache, self.spkcache_preds)
        return chunk_preds

    @property
    def lengths(self) -> tuple[int, int]:
        return self.spkcache.shape[1], self.fifo.shape[1]


class AsyncCache(_Cache):
    """NeMo's `streaming_update_async` (fixed-size, zero-padded buffers with lengths)."""

    def __init__(self, geometry: StreamingConfig, n_spk: int, d_model: int, device=None):
        super().__init__(geometry, n_spk, d_model, device)
        self.spkcache = torch.zeros((1, geometry.spkcache_len, d_model), device=device)
        self.spkcache_preds = torch.zeros((1, geometry.spkcache_len, n_spk), device=device)
        self.spkcache_length = 0
        self.fifo = torch.zeros((1, geometry.fifo_len, d_model), device=device)
        self.fifo_preds = torch.zeros((1, geometry.fifo_len, n_spk), device=device)
        self.fifo_length = 0

    def context(self) -> torch.Tensor:
        return torch.cat([self.spkcache[:, :self.spkcache_length], self.fifo[:, :self.fifo_length]], dim=1)

    def update(self, chunk: torch.Tensor, preds: torch.Tensor, lc: int, rc: int) -> torch.Tensor:
        g, n_spk = self.g, self.n_spk
        d = chunk.shape[2]
        max_s, max_f, c_max = self.spkcache.shape[1], self.fifo.shape[1], chunk.shape[1] - lc - rc
        max_pop = min(max(g.spkcache_update_period, c_max), c_max + max_f)
        c_len = max(0, min(chunk.shape[1] - lc, c_max))
        s_len, f_len = self.spkcache_length, self.fifo_length
        fifo_preds = torch.zeros((1, max_f, n_spk), device=preds.device)
        fifo_preds[0, :f_len] = preds[0, s_len:s_len + f_len]
        chunk_preds = torch.zeros((1, c_max, n_spk), device=preds.device)
        chunk_preds[0, :c_len] = preds[0, s_len + f_len + lc:s_len + f_len + lc + c_len]
        new_fifo = torch.zeros((1, max_f + c_max, d), device=preds.device)
        new_fifo_preds = torch.zeros((1, max_f + c_max, n_spk), device=preds.device)
        new_cache = torch.zeros((1, max_s + max_pop, d), device=preds.device)
        new_cache_preds = torch.zeros((1, max_s + max_pop, n_spk), device=preds.device)
        new_cache[0, :s_len] = self.spkcache[0, :s_len]
        new_cache_preds[0, :s_len] = self.spkcache_preds[0, :s_len]
        new_fifo[0, :f_len] = self.fifo[0, :f_len]
        new_fifo_preds[0, :f_len] = fifo_preds[0, :f_len]
        new_fifo[0, f_len:f_len + c_len] = chunk[0, lc:lc + c_len]
        new_fifo_preds[0, f_len:f_len + c_len] = chunk_preds[0, :c_len]
        fifo_length = f_len + c_len
        cache_length = s_len
        if f_len + c_len > max_f:
            pop = max(g.spkcache_update_period, c_max - max_f + f_len)
            pop = min(pop, f_len + c_len)
            cache_length += pop
            pop_embs, pop_preds = new_fifo[0, :pop], new_fifo_preds[0, :pop]
            self._silence_profile(pop_embs.unsqueeze(0), pop_preds.unsqueeze(0))
            new_cache[0, s_len:s_len + pop] = pop_embs
            # NeMo's test `spkcache_preds[0, 0] >= 0` holds for every probability: a frame keeps its FIFO prediction
            new_cache_preds[0, s_len:s_len + pop] = pop_preds
            fifo_length -= pop
            new_fifo[0, :fifo_length] = new_fifo[0, pop:pop + fifo_length].clone()
            new_fifo_preds[0, :fifo_length] = new_fifo_preds[0, pop:pop + fifo_length].clone()
            new_fifo[0, fifo_length:] = 0
            new_fifo_preds[0, fifo_length:] = 0
        self.fifo, self.fifo_preds = new_fifo[:, :max_f], new_fifo_preds[:, :max_f]
        self.fifo_length = fifo_length
        self.spkcache, self.spkcache_preds = new_cache[:, :g.spkcache_len], new_cache_preds[:, :g.spkcache_len]
        if cache_length > g.spkcache_len:
            self.spkcache, self.spkcache_preds = self.compress(new_cache, new_cache_preds)
            cache_length = g.spkcache_len
        self.spkcache_length = cache_length
        return chunk_preds[:, :c_len]

    @property
    def lengths(self) -> tuple[int, int]:
        return self.spkcache_length, self.fifo_length
