"""Per-step confidence from log-probabilities, as NeMo defines its measures.

Both measures map to [0, 1], where 1 is certain and 0 is a uniform distribution over `v` classes:
- "entropy": Tsallis entropy with index `alpha`, exponentially normalized (NeMo's default method);
- "max_prob": the largest probability raised to `alpha`, linearly normalized.
"""
from __future__ import annotations

import math

import torch

METHODS = ("entropy", "max_prob")


def confidence(logp: torch.Tensor, method: str = "entropy", alpha: float = 0.33) -> torch.Tensor:
    """logp [..., v] log-probabilities (blank included) -> confidence [...]."""
    logp = torch.nan_to_num(logp.float())
    v = logp.shape[-1]
    if method == "entropy":
        if alpha == 1.0:
            # Gibbs entropy, exponential normalization.
            neg_h = (logp.exp() * logp).sum(-1)
            return (neg_h.exp() * v - 1.0) / (v - 1.0)
        # Tsallis entropy S = (1 - sum p^a) / (a - 1); normalized as (exp(-S) - exp(-S_max)) / (1 - exp(-S_max)).
        s = (1.0 - (logp * alpha).exp().sum(-1)) / (alpha - 1.0)
        s_max = (1.0 - v ** (1.0 - alpha)) / (alpha - 1.0)
        floor = math.exp(-s_max)
        return ((-s).exp() - floor) / (1.0 - floor)
    if method == "max_prob":
        top = logp.max(dim=-1).values
        if alpha == 1.0:
            return (top.exp() * v - 1.0) / (v - 1.0)
        va = v**alpha
        return ((top * alpha).exp() * va - 1.0) / (va - 1.0)
    raise ValueError(f"unknown confidence method {method!r} (one of {', '.join(METHODS)})")
