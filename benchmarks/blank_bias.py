"""Realistic decoding work for a transducer with random weights (the benchmarks' `make_*` scripts).

With random initialisation an encoder's output is nearly the same vector on every frame, so a transducer's
joint makes the same decision on every frame: blank everywhere (no decoding work) or labels on nearly every
frame, up to the per-frame cap (far more decoding work than real speech gives). Two changes to the joint's
weights, not its shapes (so not its cost per step), give a realistic load:

  1. `recentre`: the joint's encoder projection sees each frame's deviation from the mean frame of the
     benchmark clip, amplified: enc(x) = gain * W (x - mean) + b, so decisions change from frame to frame;
  2. `bisect_blank_bias`: a constant added to the blank logit's bias, found by bisection so that greedy
     decoding of the clip emits about a target number of labels (about 3 a second: what a real model emits
     for read speech).

Pure Python over torch tensors: it runs in any reference's virtual environment.
"""
from __future__ import annotations

from typing import Callable

ENC_GAIN = 30.0


def recentre(proj, mu, gain: float = ENC_GAIN) -> None:
    """proj (an nn.Linear on encoder frames) <- gain * W (x - mu) + b, in place."""
    import torch

    with torch.no_grad():
        proj.bias -= gain * (proj.weight @ mu.to(proj.weight.dtype))
        proj.weight *= gain


def bisect_blank_bias(count: Callable[[float], int], target: float, log=None) -> tuple[float, int]:
    """The blank-bias offset b for which count(b) (labels greedy decoding emits with the blank logit's bias
    raised by b) is nearest `target` (within 5 % where bisection reaches it); (b, count(b)). count(b) must
    leave the model with the offset b applied: the last call is count(best)."""
    tried: dict[float, int] = {}

    def at(b: float) -> int:
        tried[b] = count(b)
        if log:
            log(f"blank bias {b:+.4f}: {tried[b]} labels")
        return tried[b]

    lo, hi = -1.0, 1.0  # at(lo) > target >= at(hi)
    while at(lo) <= target and lo > -64:
        lo *= 2
    while at(hi) > target and hi < 64:
        hi *= 2
    for _ in range(20):
        mid = (lo + hi) / 2
        n = at(mid)
        if abs(n - target) <= 0.05 * target:
            break
        lo, hi = (mid, hi) if n > target else (lo, mid)
    best = min(tried, key=lambda k: abs(tried[k] - target))
    return best, at(best)
