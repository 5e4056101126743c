"""The model as a transducer search sees it: a few callables, no modules.

Every transducer search in this package (greedy, default beam, mAES, batched mALSD) runs on a
`TransducerSteps` and on encoder frames already projected for the joint, so each algorithm can be
tested on a hand-written probability table as well as on a real model, and one search serves every
model with that head.

States are opaque to the search: it only creates them, selects rows of them, concatenates them
and (greedy over a batch) keeps the new rows of some and the old rows of the others.

The steps also carry the model's decoding constants: the blank index, the TDT duration table and
`max_symbols`, the per-frame label cap from the model's config. The recognizer reads the model's
`max_symbols` once, when it builds its steps; no search takes it from anywhere else (the default
beam and mAES run without it, as NeMo's do: parakeet/beams.py clears it for them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch

# Labels one hypothesis may emit on one frame before time moves on, where neither the caller nor the
# model's config says (NeMo's greedy default; its published configs set 10 too).
DEFAULT_MAX_SYMBOLS = 10


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
    max_symbols: labels one hypothesis may emit on one frame before time moves on (None: no bound,
        as NeMo's default beam and mAES have: the recognizer runs those with None, the model's cap
        being greedy's).
    merge_state(mask [N] bool, new, old) -> new rows where mask, old rows elsewhere; optional (the
        default selects rows of cat_states([old, new])), a faster equivalent for a known state.
    """

    predict: Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]
    joint: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    init_state: Callable[[int], Any]
    select_state: Callable[[Any, torch.Tensor], Any]
    cat_states: Callable[[Sequence[Any]], Any]
    blank: int
    durations: Optional[tuple[int, ...]] = None
    max_symbols: Optional[int] = DEFAULT_MAX_SYMBOLS
    merge_state: Optional[Callable[[torch.Tensor, Any, Any], Any]] = None

    def __post_init__(self):
        ms = self.max_symbols
        if ms is not None and (isinstance(ms, bool) or int(ms) != ms or ms < 1):
            raise ValueError(f"max_symbols must be None or an integer >= 1, got {ms!r}")

    def merge(self, mask: torch.Tensor, new, old):
        """The state whose row i is new's where mask[i], else old's."""
        if self.merge_state is not None:
            return self.merge_state(mask, new, old)
        n = mask.shape[0]
        rows = torch.arange(n, device=mask.device)
        return self.select_state(self.cat_states([old, new]), torch.where(mask, rows + n, rows))

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


def lstm_steps(predict, joint, init_state, blank: int, durations=None,
               max_symbols: Optional[int] = DEFAULT_MAX_SYMBOLS) -> TransducerSteps:
    """Steps for a predictor whose state is a tuple of tensors [layers, N, H] (NeMo's LSTM)."""

    def select(state, idx):
        return tuple(s.index_select(1, idx) for s in state)

    def cat(states):
        return tuple(torch.cat(parts, dim=1) for parts in zip(*states))

    def merge(mask, new, old):
        return tuple(torch.where(mask[None, :, None], a, b) for a, b in zip(new, old))

    return TransducerSteps(predict, joint, init_state, select, cat, blank,
                           tuple(int(d) for d in durations) if durations is not None else None,
                           max_symbols, merge)
