"""NeMo's post-processing of a diarizer's per-frame speaker probabilities into speaker turns
(`ts_vad_post_processing` per speaker, then `generate_diarization_output_lines`), with its parameters
(`PostProcessingParams`: onset, offset, pad_onset, pad_offset, min_duration_on, min_duration_off; NeMo's
defaults 0.5, 0.5, 0, 0, 0, 0) and its arithmetic:

- each frame's probability is repeated `units` times (10 ms units: 8 for 80 ms frames);
- binarization (hysteresis): a turn starts at the first unit above `onset` and ends at the first later unit
  below `offset` (unit index x 0.01 s); it is kept only if its padded end lies after its padded start, and
  becomes [max(0, start - pad_onset), end + pad_offset]; a turn still open at the end ends at the last
  unit's index x 0.01 (10 ms before the end of the last frame); NeMo holds the turns in float32 and merges
  padded turns that touch or overlap;
- filtering (speech first): turns shorter than `min_duration_on` are dropped, then gaps shorter than
  `min_duration_off` are filled (turns merged); comparisons in float32, as NeMo's tensors are;
- times rounded to 2 decimals, then NeMo's interval merge (turns overlapping by more than 2e-5 s merge).

Comparisons against thresholds follow NeMo's float32 tensors: a probability is compared with the threshold
rounded to float32.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..results import SpeakerTurn

UNIT_S = 0.01


@dataclass(frozen=True)
class PostProcessing:
    onset: float = 0.5
    offset: float = 0.5
    pad_onset: float = 0.0
    pad_offset: float = 0.0
    min_duration_on: float = 0.0
    min_duration_off: float = 0.0


def _f32(x: float) -> float:
    return float(np.float32(x))


def _nemo_merge(segs: list) -> list:
    """`merge_overlap_segment` exactly: a run of rows each touching the next becomes [first start, last end]."""
    if len(segs) <= 1:
        return [list(s) for s in segs]
    segs = sorted(segs, key=lambda s: s[0])
    out = []
    head = segs[0][0]
    for i in range(len(segs)):
        touches_next = i + 1 < len(segs) and segs[i][1] >= segs[i + 1][0]
        if not touches_next:
            out.append([head, segs[i][1]])
            if i + 1 < len(segs):
                head = segs[i + 1][0]
    return out


def binarize(probs: np.ndarray, p: PostProcessing, units: int) -> list:
    """NeMo's `binarization` over the probabilities repeated `units` times. The repeated units of one frame are
    equal, so a threshold is crossed only at a frame's first unit: the loop runs over frames, each at unit
    index frame x units, which is what NeMo's loop over units finds."""
    seq = np.asarray(probs, dtype=np.float32)
    onset, offset = np.float32(p.onset), np.float32(p.offset)
    above, below = seq > onset, seq < offset
    segs = []
    speech, start = False, 0.0
    # only frames where the state can change: above onset while silent, below offset while speaking
    for f in np.flatnonzero(above | below).tolist():
        i = f * units
        if speech:
            if below[f]:
                if i * UNIT_S + p.pad_offset > max(0, start - p.pad_onset):
                    segs.append([_f32(max(0, start - p.pad_onset)), _f32(i * UNIT_S + p.pad_offset)])
                start = i * UNIT_S
                speech = False
        elif above[f]:
            start = i * UNIT_S
            speech = True
    if speech:
        i = len(seq) * units - 1
        segs.append([_f32(max(0, start - p.pad_onset)), _f32(i * UNIT_S + p.pad_offset)])
    return _nemo_merge(segs)


def _filter(segs: list, p: PostProcessing) -> list:
    if not segs:
        return segs
    if p.min_duration_on > 0.0:
        t = np.float32(p.min_duration_on)
        segs = [s for s in segs if np.float32(s[1]) - np.float32(s[0]) >= t]
    if p.min_duration_off > 0.0 and segs:
        t = np.float32(p.min_duration_off)
        ordered = sorted(segs, key=lambda s: s[0])
        gaps = [[ordered[i][1], ordered[i + 1][0]] for i in range(len(ordered) - 1)]
        long = [g for g in gaps if np.float32(g[1]) - np.float32(g[0]) >= t]
        short = [g for g in gaps if not any(g[0] == x[0] and g[1] == x[1] for x in long)]
        segs = _nemo_merge(segs + short)
    return segs


def _fl2int(x: float) -> int:
    return int(np.round(np.float32(x * 1e5)))


def _int2fl(x: int) -> float:
    return float(np.round(np.float32(x / 1e5), 5))


def _merge_intervals(ranges: list) -> list:
    """NeMo's `merge_float_intervals` (decimals 5, margin 2) and `merge_int_intervals` (which sorts the starts
    and the ends each on their own)."""
    ints = []
    for a, b in ranges:
        s, e = _fl2int(a) + 2, _fl2int(b)
        if s < e:
            ints.append([s, e])
    if len(ints) > 1:
        starts = sorted(x[0] for x in ints)
        ends = sorted(x[1] for x in ints)
        ints = [[s, e] for s, e in zip(starts, ends)]
        merged = []
        start, end = ints[0]
        for s2, e2 in ints[1:]:
            if end >= s2:
                end = max(e2, end)
            else:
                merged.append([start, end])
                start, end = s2, max(e2, end)
        merged.append([start, end])
        ints = merged
    return [[_int2fl(s - 2), _int2fl(e)] for s, e in ints]


def speaker_turns(probs: np.ndarray, p: PostProcessing, units: int, labels=None) -> list[SpeakerTurn]:
    """probs [frames, speakers] -> turns sorted by (start, speaker); `units` 10 ms units per frame."""
    probs = np.asarray(probs, dtype=np.float32)
    turns = []
    for k in range(probs.shape[1] if probs.ndim == 2 else 0):
        segs = _filter(binarize(probs[:, k], p, units), p)
        rounded = [[round(float(s), 2), round(float(e), 2)] for s, e in segs]
        name = labels[k] if labels is not None else f"speaker_{k}"
        for s, e in _merge_intervals(rounded):
            turns.append(SpeakerTurn(name, round(s, 3), round(e, 3)))
    turns.sort(key=lambda t: (t.start, t.speaker, t.end))
    return turns


def nemo_lines(turns: list[SpeakerTurn]) -> list[str]:
    """NeMo's output strings ("start end speaker_k", 3 decimals), grouped by speaker as NeMo prints them."""
    ordered = sorted(turns, key=lambda t: (int(t.speaker.rsplit("_", 1)[-1]) if t.speaker.rsplit("_", 1)[-1].isdigit()
                                           else 0, t.speaker, t.start))
    return [f"{t.start:.3f} {t.end:.3f} {t.speaker}" for t in ordered]
