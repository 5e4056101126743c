"""Greedy transducer decoding (RNN-T and TDT) by label looping over a batch.

The search sees no modules, only callables:
- `predict(labels [B] long, state) -> (pred [B, H], state)`: one predictor step;
- `joint(enc [B, H], pred [B, H]) -> logits [B, V+1(+D)]`: tokens, blank, then TDT duration logits;
- `merge_state(mask [B] bool, new, old) -> state`: take `new` where mask, else `old`.

Semantics (NeMo's label-looping greedy): at each outer step every active utterance finds its next
non-blank label, skipping blanks (a blank moves time by one frame for RNN-T, by its predicted
duration, at least one, for TDT). A label moves time by its duration (TDT) or not at all (RNN-T).
After `max_symbols` labels on one frame, time moves on by one frame. Each utterance's result does
not depend on the others in the batch.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from .decoded import Decoded
from .confidence import confidence as confidence_measure

# Labels one hypothesis may emit on one frame before time moves on, where neither the caller nor the
# model's config says (NeMo's greedy default; its published configs set 10 too).
DEFAULT_MAX_SYMBOLS = 10


def greedy_batch(
    enc: torch.Tensor,
    lengths: torch.Tensor,
    predict: Callable,
    joint: Callable,
    merge_state: Callable,
    init_state,
    blank: int,
    durations: Optional[Sequence[int]] = None,
    max_symbols: Optional[int] = DEFAULT_MAX_SYMBOLS,
    confidence: Optional[str] = "entropy",
    alpha: float = 0.33,
) -> list[Decoded]:
    """enc [B, T, H] (already projected for the joint), lengths [B] -> one Decoded per utterance."""
    b, t_max, _ = enc.shape
    device = enc.device
    n_tok = blank + 1
    dur_table = torch.tensor(list(durations), device=device) if durations is not None else None
    rows = torch.arange(b, device=device)
    lengths = lengths.to(device)
    last = torch.clamp(lengths - 1, min=0)
    time = torch.zeros(b, dtype=torch.long, device=device)
    active = time < lengths

    labels = torch.full((b,), blank, dtype=torch.long, device=device)
    pred, state = predict(labels, init_state)

    hyps = [Decoded(ids=[], frames=[], durations=[] if durations is not None else [], confidences=[]) for _ in range(b)]
    last_frame = torch.full((b,), -1, dtype=torch.long, device=device)
    run = torch.zeros(b, dtype=torch.long, device=device)  # labels emitted on last_frame

    def step(frames: torch.Tensor):
        logits = joint(enc[rows, frames], pred)
        tok = logits[:, :n_tok]
        score, lab = tok.max(dim=-1)
        if dur_table is not None:
            dur = dur_table[logits[:, n_tok:].argmax(dim=-1)]
        else:
            dur = (lab == blank).long()
        return tok, score, lab, dur

    while bool(active.any()):
        active_prev = active.clone()
        safe = torch.minimum(time, last)
        tok, score, lab, dur = step(safe)
        is_blank = lab == blank
        if dur_table is not None:
            dur = torch.where(is_blank & (dur == 0), torch.ones_like(dur), dur)
        label_time = time.clone()
        time = time + dur * active
        active = time < lengths
        advance = active & is_blank
        while bool(advance.any()):
            label_time = torch.where(advance, time, label_time)
            tok2, score2, lab2, dur2 = step(torch.minimum(time, last))
            tok = torch.where(advance[:, None], tok2, tok)
            score = torch.where(advance, score2, score)
            lab = torch.where(advance, lab2, lab)
            is_blank = lab == blank
            if dur_table is not None:
                dur2 = torch.where(is_blank & (dur2 == 0), torch.ones_like(dur2), dur2)
            dur = torch.where(advance, dur2, dur)
            time = torch.where(advance, time + dur2, time)
            active = time < lengths
            advance = active & is_blank
        found = active_prev & ~is_blank
        if bool(found.any()):
            idx = found.nonzero().flatten()
            logp = torch.log_softmax(tok[idx].float(), dim=-1)
            lp = logp.gather(1, lab[idx, None])[:, 0]
            conf = confidence_measure(logp, confidence, alpha) if confidence else None
            for j, bi in enumerate(idx.tolist()):
                h = hyps[bi]
                h.ids.append(int(lab[bi]))
                h.frames.append(int(label_time[bi]))
                if durations is not None:
                    h.durations.append(int(dur[bi]))
                if conf is not None:
                    h.confidences.append(float(conf[j]))
                h.logprobs.append(float(lp[j]))
                h.score += float(lp[j])
            same = found & (label_time == last_frame)
            run = torch.where(found, torch.where(same, run + 1, torch.ones_like(run)), run)
            last_frame = torch.where(found, label_time, last_frame)
            new_pred, new_state = predict(torch.where(found, lab, torch.full_like(lab, blank)), state)
            state = merge_state(found, new_state, state)
            pred = torch.where(found[:, None], new_pred, pred)
        if max_symbols is not None:
            force = active & ~is_blank & (run >= max_symbols) & (last_frame == time)
            time = time + force.long()
            active = time < lengths
    return hyps


def greedy_one(
    enc: torch.Tensor,
    length: int,
    predict: Callable,
    joint: Callable,
    init_state,
    blank: int,
    durations: Optional[Sequence[int]] = None,
    max_symbols: Optional[int] = DEFAULT_MAX_SYMBOLS,
    confidence: Optional[str] = "entropy",
    alpha: float = 0.33,
) -> Decoded:
    """`greedy_batch` for one utterance, with Python integers for time, labels and durations.

    enc [T, H] (projected for the joint). The same decisions in the same order as greedy_batch
    on a batch of one; a step costs one joint call and one transfer of its decision instead of
    the batch's two dozen small tensor operations, which dominate on a CPU when B = 1."""
    n_tok = blank + 1
    tdt = durations is not None
    dur_values = list(durations) if tdt else None
    hyp = Decoded(ids=[], frames=[], durations=[] if tdt else [], confidences=[])
    labels = torch.full((1,), blank, dtype=torch.long, device=enc.device)
    pred, state = predict(labels, init_state)

    def step(frame: int):
        logits = joint(enc[frame : frame + 1], pred)
        tok = logits[:, :n_tok]
        lab = int(tok.max(dim=-1)[1])  # the same call as greedy_batch: the same index on a tie
        if tdt:
            dur = dur_values[int(logits[:, n_tok:].argmax(dim=-1))]
            if lab == blank and dur == 0:
                dur = 1
        else:
            dur = 1 if lab == blank else 0
        return tok, lab, dur

    time = 0
    last_frame = -1
    run = 0
    while time < length:
        tok, lab, dur = step(time)
        label_time = time
        time += dur
        while time < length and lab == blank:
            label_time = time
            tok, lab, dur = step(time)
            time += dur
        if lab != blank:
            logp = torch.log_softmax(tok.float(), dim=-1)
            lp = float(logp[0, lab])
            hyp.ids.append(lab)
            hyp.frames.append(label_time)
            if tdt:
                hyp.durations.append(dur)
            if confidence:
                hyp.confidences.append(float(confidence_measure(logp, confidence, alpha)[0]))
            hyp.logprobs.append(lp)
            hyp.score += lp
            run = run + 1 if label_time == last_frame else 1
            last_frame = label_time
            pred, state = predict(torch.full((1,), lab, dtype=torch.long, device=enc.device), state)
            if max_symbols is not None and time < length and run >= max_symbols and last_frame == time:
                time += 1
    return hyp
