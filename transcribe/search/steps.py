"""The model as a transducer search sees it: a few callables, no modules.

Every transducer search in this package (greedy, default beam, mAES, batched mALSD) runs on a
`TransducerSteps` and on encoder frames already projected for the joint, so each algorithm can be
tested on a hand-written probability table as well as on a real model, and one search serves every
model with that head.

States are opaque to the search: it only creates them, selects rows of them and concatenates them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch


@dataclass(frozen=True)
class TransducerSteps:
    """predict(labels [N] long, state) -> (pred [N, H], state): one predictor step for N hypotheses;
        the blank label is the start of sequence (NeMo's blank-as-pad predictor embeds it to zeros).
    joint(enc [..., H], pred [..., H]) -> logits [..., V+1(+D)]: tokens, blank (index `blank`, the
        last token), then the TDT duration logits; leading shapes broadcast.
    init_state(n) -> the state of n fresh hypotheses.
    select_state(state, idx [M] long) -> the state of rows idx (rows may repeat).
    cat_states(states) -> one state holding the rows of all, in order.
    durations: the TDT duration table (None for RNN-T).
    """

    predict: Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]
    joint: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    init_state: Callable[[int], Any]
    select_state: Callable[[Any, torch.Tensor], Any]
    cat_states: Callable[[Sequence[Any]], Any]
    blank: int
    durations: Optional[tuple[int, ...]] = None

    @property
    def n_tokens(self) -> int:
        """Vocabulary size including blank (the joint's token logits)."""
        return self.blank + 1


def check_durations(durations: Optional[Sequence[int]]) -> Optional[tuple[int, ...]]:
    """A TDT duration table, validated (None for RNN-T): integers, none negative, no duplicate, at
    least one positive (else decoding could not advance). Every transducer search checks it."""
    if durations is None:
        return None
    table = tuple(durations)
    if not table:
        raise ValueError("the TDT duration table is empty")
    for d in table:
        if isinstance(d, bool) or int(d) != d:
            raise ValueError(f"TDT durations must be integers, got {list(table)}")
    table = tuple(int(d) for d in table)
    if any(d < 0 for d in table):
        raise ValueError(f"the TDT duration table has a negative duration: {list(table)}")
    if len(set(table)) != len(table):
        raise ValueError(f"the TDT duration table has a duplicate duration (durations must be distinct, "
                         f"none may repeat): {list(table)}")
    if max(table) <= 0:
        raise ValueError(f"the TDT duration table has no positive duration, so decoding could not advance: {list(table)}")
    return table


def logaddexp32(a: float, b: float) -> float:
    """NeMo's TDT merge of two hypothesis scores: torch.logaddexp on float32 tensors, so a merged
    score is rounded to float32 (an unmerged one is not)."""
    return float(torch.logaddexp(torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)))


def lstm_steps(predict, joint, init_state, blank: int, durations=None) -> TransducerSteps:
    """Steps for a predictor whose state is a tuple of tensors [layers, N, H] (NeMo's LSTM)."""

    def select(state, idx):
        return tuple(s.index_select(1, idx) for s in state)

    def cat(states):
        return tuple(torch.cat(parts, dim=1) for parts in zip(*states))

    return TransducerSteps(predict, joint, init_state, select, cat, blank,
                           tuple(int(d) for d in durations) if durations is not None else None)
