"""Greedy CTC decoding over a log-probability matrix."""
from __future__ import annotations

from typing import Optional

import torch

from .decoded import Decoded
from .confidence import confidence as confidence_measure


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
    top = logp.gather(1, best[:, None])[:, 0]
    ids = best.tolist()
    hyp = Decoded(ids=[], frames=[], durations=[], confidences=[])
    prev = -1
    for t, k in enumerate(ids):
        if k != blank:
            if k != prev:
                hyp.ids.append(k)
                hyp.frames.append(t)
                hyp.durations.append(1)
                hyp.logprobs.append(0.0)
                if conf is not None:
                    hyp.confidences.append(float(conf[t]))
            else:
                hyp.durations[-1] += 1
                if conf is not None:
                    hyp.confidences[-1] = min(hyp.confidences[-1], float(conf[t]))
            hyp.logprobs[-1] += float(top[t])
            hyp.score += float(top[t])
        prev = k
    return hyp
