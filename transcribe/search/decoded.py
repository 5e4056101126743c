"""What a search returns for one hypothesis: token ids with their frames, before any text."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Decoded:
    """A decoded token sequence. `frames[i]` is the encoder frame token i was emitted at;
    `durations[i]` its duration in frames (TDT: predicted; CTC: the run's length; RNN-T: empty
    in greedy results, 1 in beams); `score` is the search's total log-probability (for a beam,
    the hypothesis score, before any length normalization); `normalized_score` is what a beam
    ranked by when it normalizes by length (None elsewhere)."""

    ids: list[int]
    frames: list[int]
    durations: list[int] = field(default_factory=list)
    confidences: list[float] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    score: float = 0.0
    normalized_score: Optional[float] = None
