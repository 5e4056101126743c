"""Greedy CTC decoding and CTC forced alignment (Viterbi) over a log-probability matrix."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch

from .decoded import Decoded
from .confidence import confidence as confidence_measure


class Run(NamedTuple):
    """One token of a collapsed CTC path: its id, the first frame of its run and the run's length."""

    id: int
    frame: int
    frames: int
    continued: bool = False  # the run goes on from `previous` (the frame before the path): no new token


def collapse(path: Sequence[int], blank: int, previous: int = -1) -> list[Run]:
    """A frame-wise label path (e.g. an argmax) -> its token runs, in order: repeats collapse, blanks
    drop out. Negative labels (no label, as past a length) drop out like the blank and end a run.

    `previous`: the label of the frame before `path[0]` (a stream's last chunk). A run of it at the
    start of `path` is the continuation of a token already counted: it is the first run, with
    `continued` set. With the default -1 no run is continued."""
    runs: list[Run] = []
    prev, start = previous, 0
    for t, k in enumerate(path):
        if k != prev:
            if t > start and prev != blank and prev >= 0:
                runs.append(Run(prev, start, t - start, start == 0 and prev == previous))
            prev, start = k, t
    end = len(path)
    if end > start and prev != blank and prev >= 0:
        runs.append(Run(prev, start, end - start, start == 0 and prev == previous))
    return runs


def greedy(
    logp: torch.Tensor,
    length: int,
    blank: int,
    confidence: Optional[str] = "entropy",
    alpha: float = 0.33,
) -> Decoded:
    """logp [T, V+1] -> Decoded. Repeats collapse and blanks drop out.

    A token's frame is the first frame of its run, its duration the run's length; its confidence is
    the minimum over the run's frames, blank frames excluded (NeMo's aggregation); its log-prob the
    sum over the run's frames.
    """
    logp = logp[:length].float()
    best = logp.argmax(dim=-1)
    conf = confidence_measure(logp, confidence, alpha) if confidence else None
    top = logp.gather(1, best[:, None])[:, 0].tolist()
    conf = conf.tolist() if conf is not None else None
    hyp = Decoded(ids=[], frames=[], durations=[], confidences=[])
    for run in collapse(best.tolist(), blank):
        hyp.ids.append(run.id)
        hyp.frames.append(run.frame)
        hyp.durations.append(run.frames)
        lp = 0.0
        for t in range(run.frame, run.frame + run.frames):
            lp += top[t]
            hyp.score += top[t]
        hyp.logprobs.append(lp)
        if conf is not None:
            c = conf[run.frame]
            for t in range(run.frame + 1, run.frame + run.frames):
                c = min(c, conf[t])
            hyp.confidences.append(c)
    return hyp


@dataclass
class Alignment:
    """The best CTC path of a given token sequence, as one frame run per token.

    `starts[i]` is the first frame of token i's run, `ends[i]` one past its last (so `ends[i] >
    starts[i]`); `logprobs[i]` the sum of token i's log-probs over its run; `confidences[i]`
    exp(mean log-prob over the run), in (0, 1] for log-probabilities; `score` the path's total
    log-prob, blank frames included."""

    starts: list[int]
    ends: list[int]
    logprobs: list[float]
    confidences: list[float]
    score: float


def forced_align(
    logp: torch.Tensor,
    ids: Sequence[int],
    blank: int,
    length: Optional[int] = None,
) -> Optional[Alignment]:
    """The single best (Viterbi) CTC path of `ids` through `logp` [T, V], or None when there is none.

    Standard CTC topology over the extended sequence (blank, y1, blank, y2, ..., yn, blank): a path
    starts on the first blank or y1, ends on yn or the last blank, and at each frame stays, moves
    one state on, or skips a blank between two different tokens (equal neighbours need a blank
    between them). Token i's run is the frames the path sits on y_i's state.

    None when no path exists: T < n + (number of equal adjacent pairs), or every path has a
    log-prob of -inf. Empty `ids` give empty lists and the all-blank score.

    Ties (exactly equal path scores) go deterministically: at the last frame the path ends on yn
    unless the last blank is strictly better; then, tracing back, at each frame staying in the
    state wins over having come from the state before, which wins over having skipped a blank.
    So among tied paths the one that enters each state earliest wins: on a flat table, ids [a, b]
    over 5 frames give a on frame 0 and b on frames 1-4.

    Only the n+1 needed columns are read (gathered in `logp`'s dtype and device, then computed in
    float64 on the CPU); they must not hold NaN or +inf. `length` limits the frames to the first
    `length` rows (default all).
    """
    ids, frames = _check_align(logp, ids, blank, length)
    blank = int(blank)
    n = len(ids)
    repeats = sum(1 for a, b in zip(ids, ids[1:]) if a == b)
    if frames < n + repeats:
        return None

    index = torch.tensor([blank] + ids, dtype=torch.long, device=logp.device)
    cols = logp[:frames].index_select(1, index).to(device="cpu", dtype=torch.float64).numpy()
    if np.isnan(cols).any() or np.isposinf(cols).any():
        raise ValueError("forced_align: logp holds NaN or +inf in the aligned columns")
    blank_lp = cols[:, 0]
    token_lp = cols[:, 1:]

    if n == 0:
        score = float(blank_lp.sum())
        if score == -np.inf:
            return None
        return Alignment(starts=[], ends=[], logprobs=[], confidences=[], score=score)
    best = _viterbi(blank_lp, token_lp, ids)
    if best is None:
        return None
    path, score = best
    return _token_runs(path, token_lp, n, score)


def _check_align(logp, ids: Sequence[int], blank: int, length: Optional[int]) -> tuple[list[int], int]:
    """forced_align's arguments, checked -> (ids as ints, the number of frames)."""
    if not isinstance(logp, torch.Tensor) or logp.dim() != 2:
        shape = tuple(logp.shape) if isinstance(logp, torch.Tensor) else type(logp).__name__
        raise ValueError(f"forced_align: logp must be a 2-D [T, V] tensor, got {shape}")
    total, vocab = logp.shape
    blank = int(blank)
    if not 0 <= blank < vocab:
        raise ValueError(f"forced_align: blank {blank} is outside the vocabulary [0, {vocab})")
    if length is None:
        length = total
    length = int(length)
    if not 0 <= length <= total:
        raise ValueError(f"forced_align: length {length} is outside [0, {total}] (logp has {total} frames)")
    ids = [int(k) for k in ids]
    for i, k in enumerate(ids):
        if not 0 <= k < vocab:
            raise ValueError(f"forced_align: ids[{i}] = {k} is outside the vocabulary [0, {vocab})")
        if k == blank:
            raise ValueError(f"forced_align: ids[{i}] = {k} is the blank id; align tokens only")
    return ids, length


def _viterbi(blank_lp: np.ndarray, token_lp: np.ndarray, ids: list[int]) -> Optional[tuple[np.ndarray, float]]:
    """The best path's state per frame over the extended sequence (blank, y1, blank, ..., yn,
    blank) and its log-prob, or None when every path has -inf; ties as `forced_align` says."""
    frames, n = len(blank_lp), len(ids)
    states = 2 * n + 1
    # Penalty for the skip into state s from s-2: 0 where allowed (a token state whose token
    # differs from the previous token), -inf elsewhere.
    penalty = np.full(states, -np.inf)
    arr = np.asarray(ids)
    allowed = np.flatnonzero(arr[1:] != arr[:-1]) + 1          # token indices i >= 1
    penalty[2 * allowed + 1] = 0.0

    alpha = np.full(states, -np.inf)
    alpha[0] = blank_lp[0]
    alpha[1] = token_lp[0, 0]
    best = np.empty(states)
    move = np.full(states, -np.inf)                         # alpha shifted by one state
    skip = np.full(states, -np.inf)                         # alpha shifted by two, penalized
    took_move = np.empty(states, dtype=bool)
    took_skip = np.empty(states, dtype=bool)
    # back[t, s]: how many states the path moved on arriving at s at frame t (0, 1 or 2).
    back = np.zeros((frames, states), dtype=np.int8)
    for t in range(1, frames):
        move[1:] = alpha[:-1]
        np.add(alpha[:-2], penalty[2:], out=skip[2:])
        np.greater(move, alpha, out=took_move)
        np.maximum(alpha, move, out=best)
        np.greater(skip, best, out=took_skip)
        np.maximum(best, skip, out=best)
        row = back[t]
        np.copyto(row, took_move)
        np.copyto(row, 2, where=took_skip)
        best[0::2] += blank_lp[t]
        best[1::2] += token_lp[t]
        alpha, best = best, alpha

    state = states - 1 if alpha[states - 1] > alpha[states - 2] else states - 2
    score = float(alpha[state])
    if score == -np.inf:
        return None
    path = np.empty(frames, dtype=np.int64)
    for t in range(frames - 1, -1, -1):
        path[t] = state
        state -= int(back[t, state])
    return path, score


def _token_runs(path: np.ndarray, token_lp: np.ndarray, n: int, score: float) -> Alignment:
    """The alignment of a best path: each token's run of frames, its log-prob and confidence."""
    frames = len(path)
    # The path's states never decrease, so each token's run is one searchsorted interval.
    token_states = 2 * np.arange(n) + 1
    starts = np.searchsorted(path, token_states, side="left")
    ends = np.searchsorted(path, token_states, side="right")
    on_token = (path % 2) == 1
    per_frame = np.zeros(frames)
    tok_frames = np.flatnonzero(on_token)
    per_frame[tok_frames] = token_lp[tok_frames, path[tok_frames] // 2]
    # Blank frames hold 0, so each sum from one run's start to the next run's start is that run.
    sums = np.add.reduceat(per_frame, starts)
    conf = np.exp(sums / (ends - starts))
    return Alignment(
        starts=starts.tolist(),
        ends=ends.tolist(),
        logprobs=sums.tolist(),
        confidences=conf.tolist(),
        score=score,
    )
