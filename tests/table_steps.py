"""Hand-written transducers for the search tests: a joint that looks its logits up in a table.

`table[t, prev]` is the joint's output row (token logits incl. blank, then duration logits) at
encoder frame t when the last emitted token is `prev` (the blank index = nothing emitted yet). The
"encoder frames" are one-hot frame indices and the predictor output is the one-hot last token, so
every search sees exactly the table.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from transcribe.search.steps import TransducerSteps


def table_steps(table: torch.Tensor, blank: int, durations: Optional[Sequence[int]] = None):
    """table [T, blank + 1, n_out] -> (enc [T, T] one-hot frames, TransducerSteps)."""
    table = table.float()
    n_frames, n_prev, _ = table.shape
    assert n_prev == blank + 1

    def predict(labels, state):
        return torch.nn.functional.one_hot(labels, n_prev).float(), labels.clone()

    def joint(enc, pred):
        enc, pred = torch.broadcast_tensors(enc[..., :, None], pred[..., None, :])
        # enc [..., T, P] one-hot frame (broadcast over P), pred [..., T, P] one-hot token
        w = enc * pred
        return torch.einsum("...tp,tpo->...o", w, table)

    def init_state(n):
        return torch.full((n,), blank, dtype=torch.long)

    def select(state, idx):
        return state.index_select(0, idx)

    def cat(states):
        return torch.cat(list(states))

    enc = torch.eye(n_frames)
    steps = TransducerSteps(predict, joint, init_state, select, cat, blank,
                            tuple(durations) if durations is not None else None)
    return enc, steps


def uniform_table(n_frames: int, vocab: int, n_dur: int = 0, fill: float = 0.0) -> torch.Tensor:
    """A table of equal logits, to be edited: [T, vocab + 1, vocab + 1 + n_dur]."""
    return torch.full((n_frames, vocab + 1, vocab + 1 + n_dur), fill)
