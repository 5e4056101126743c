"""Greedy decoding across chunks of a stream: transducers (RNN-T, TDT) and CTC.

Each chunk is decoded once; what the next chunk needs of the past is carried, never re-decoded:
- transducers carry the predictor's state and output for the last label and, for TDT, how far the
  last duration jumped past the chunk's end (NeMo's label-looping `time_jumps`), so a stream
  decodes as NeMo's `conformer_stream_step` with partial hypotheses does;
- CTC carries the last frame's label (a repeat across the boundary collapses) and the token whose
  run has not ended yet: a token is handed out when its run ends, so its confidence is its run's
  minimum as offline.

The transducer chunk is the one single-stream greedy search: offline decoding of one utterance
(`transducer.greedy_one`) runs it once over all the frames.

`reset_ids`: labels after which the predictor starts over (end-of-utterance tokens); decoding
goes on from the next frame (or where a longer TDT duration leads) with the initial state, as at
the start of a stream.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from .confidence import confidence as confidence_measure
from .ctc import collapse
from .steps import TransducerSteps


@dataclass
class Emitted:
    """A token: id, frame (local to the chunk, or global once the caller offsets it), duration in
    frames (TDT: predicted; RNN-T: None; CTC: its run), confidence and log-probability."""

    id: int
    frame: int
    duration: Optional[int]
    confidence: Optional[float]
    logprob: float


@dataclass
class TransducerCarry:
    label: int
    pred: Any
    state: Any
    time_jump: int = 0


def initial_carry(steps: TransducerSteps, device=None) -> TransducerCarry:
    """The carry at the start of a stream: the predictor after the start of sequence (the blank)."""
    labels = torch.full((1,), steps.blank, dtype=torch.long, device=device)
    state = steps.init_state(1)
    pred, state = steps.predict(labels, state)
    return TransducerCarry(steps.blank, pred, state, 0)


def _decide(steps: TransducerSteps, frame: torch.Tensor, pred) -> tuple[torch.Tensor, int, int]:
    """One joint call on one frame [1, H] -> (token logits [1, V+1], label, duration). The label is
    `max(dim=-1)`'s index, as in `transducer.greedy_batch` (the same index on a tie); the duration
    is the TDT table's predicted one, for RNN-T 1 after blank and 0 after a label."""
    logits = steps.joint(frame, pred)
    n_tok = steps.n_tokens
    tok = logits[:, :n_tok]
    lab = int(tok.max(dim=-1)[1])
    if steps.durations is not None:
        dur = int(steps.durations[int(logits[:, n_tok:].argmax(dim=-1))])
    else:
        dur = 1 if lab == steps.blank else 0
    return tok, lab, dur


def _emit(tok: torch.Tensor, lab: int, frame: int, duration: Optional[int], confidence: Optional[str],
          alpha: float) -> Emitted:
    logp = torch.log_softmax(tok.float(), dim=-1)
    conf = float(confidence_measure(logp, confidence, alpha)[0]) if confidence else None
    return Emitted(lab, frame, duration, conf, float(logp[0, lab]))


@torch.inference_mode()
def transducer_chunk(
    enc: torch.Tensor,
    steps: TransducerSteps,
    carry: TransducerCarry,
    *,
    confidence: Optional[str] = "entropy",
    alpha: float = 0.33,
    reset_ids: frozenset = frozenset(),
) -> tuple[list[Emitted], TransducerCarry]:
    """enc [T, H] (projected for the joint) -> the chunk's tokens (frames local to the chunk) and
    the carry for the next chunk. NeMo's label-looping greedy for one stream: a blank moves time by
    one frame (RNN-T) or its duration, at least one (TDT); a label by its duration (TDT) or not at
    all (RNN-T); after `steps.max_symbols` labels on one frame, time moves on by one frame. Over a
    whole utterance from `initial_carry` it is `transducer.greedy_one`, the offline search."""
    t_len = enc.shape[0]
    blank, tdt, max_symbols = steps.blank, steps.durations is not None, steps.max_symbols
    out: list[Emitted] = []
    pred, state = carry.pred, carry.state
    label = carry.label
    time = carry.time_jump
    run, run_frame = 0, -1
    while time < t_len:
        tok, lab, dur = _decide(steps, enc[time:time + 1], pred)
        if lab == blank:
            time += max(dur, 1)
            continue
        out.append(_emit(tok, lab, time, dur if tdt else None, confidence, alpha))
        run = run + 1 if run_frame == time else 1
        run_frame = time
        if lab in reset_ids:
            # The utterance is over: the decoder starts over on the next frame (with the initial
            # state on the same frame it would often see the same end again).
            fresh = initial_carry(steps, enc.device)
            pred, state, label = fresh.pred, fresh.state, blank
            time += max(dur, 1)
            run, run_frame = 0, -1
            continue
        pred, state = steps.predict(torch.full((1,), lab, dtype=torch.long, device=enc.device), state)
        label = lab
        time += dur
        if max_symbols is not None and dur == 0 and run >= max_symbols:
            time += 1
    return out, TransducerCarry(label, pred, state, time - t_len)


@dataclass
class CTCCarry:
    prev: int = -1  # the last frame's label
    open: Optional[Emitted] = None  # the token whose run has not ended
    frames: int = 0  # frames decoded so far (the chunk's offset)
    conf: list = field(default_factory=list)


@torch.inference_mode()
def ctc_chunk(
    logp: torch.Tensor,
    blank: int,
    carry: CTCCarry,
    *,
    confidence: Optional[str] = "entropy",
    alpha: float = 0.33,
    final: bool = False,
) -> tuple[list[Emitted], CTCCarry]:
    """logp [T, V+1] of the chunk -> the tokens whose runs ended (global frames), the carry. With
    `final`, the open token is handed out too."""
    logp = logp.float()
    best = logp.argmax(dim=-1).tolist()
    top = logp.gather(1, torch.tensor(best)[:, None])[:, 0].tolist() if best else []
    conf = confidence_measure(logp, confidence, alpha).tolist() if confidence and best else [None] * len(best)
    runs = collapse(best, blank, carry.prev)
    out: list[Emitted] = []
    cur = carry.open
    if cur is not None and best and not (runs and runs[0].continued):
        out.append(cur)  # its run ended with the previous chunk
        cur = None
    for run in runs:
        first, end = run.frame, run.frame + run.frames
        if run.continued:
            tok = cur  # None when the previous run was already handed out (a final chunk before)
        else:
            tok = Emitted(run.id, carry.frames + first, 1, conf[first], top[first])
            first += 1
        if tok is not None:
            for i in range(first, end):
                tok.duration += 1
                tok.logprob += top[i]
                if conf[i] is not None:
                    tok.confidence = min(tok.confidence, conf[i])
        if end < len(best):
            if tok is not None:
                out.append(tok)
            cur = None
        else:
            cur = tok
    if final and cur is not None:
        out.append(cur)
        cur = None
    prev = best[-1] if best else carry.prev
    return out, CTCCarry(prev, cur, carry.frames + len(best))
