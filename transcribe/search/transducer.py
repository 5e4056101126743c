"""Greedy transducer decoding (RNN-T and TDT): label looping over a batch, and one utterance.

Both searches run on a `steps.TransducerSteps` (predict, joint, the state's row operations, the
blank, the TDT durations and `max_symbols`) and on encoder frames already projected for the joint.

Semantics (NeMo's label-looping greedy): at each outer step every active utterance finds its next
non-blank label, skipping blanks (a blank moves time by one frame for RNN-T, by its predicted
duration, at least one, for TDT). A label moves time by its duration (TDT) or not at all (RNN-T).
After `steps.max_symbols` labels on one frame, time moves on by one frame. Each utterance's result
does not depend on the others in the batch.

`greedy_one` is the streaming search (`stream_greedy.transducer_chunk`) run over the whole
utterance from a fresh carry: one implementation for one stream, offline or live.
"""
from __future__ import annotations

from typing import Optional

import torch

from .confidence import confidence as confidence_measure
from .decoded import Decoded
from .steps import DEFAULT_MAX_SYMBOLS, TransducerSteps
from .stream_greedy import Emitted, initial_carry, transducer_chunk

__all__ = ["DEFAULT_MAX_SYMBOLS", "greedy_batch", "greedy_one"]


def greedy_batch(
    enc: torch.Tensor,
    lengths: torch.Tensor,
    steps: TransducerSteps,
    confidence: Optional[str] = "entropy",
    alpha: float = 0.33,
) -> list[Decoded]:
    """enc [B, T, H] (already projected for the joint), lengths [B] -> one Decoded per utterance."""
    b, t_max, _ = enc.shape
    device = enc.device
    blank, n_tok, max_symbols = steps.blank, steps.n_tokens, steps.max_symbols
    dur_table = torch.tensor(list(steps.durations), device=device) if steps.durations is not None else None
    rows = torch.arange(b, device=device)
    lengths = lengths.to(device)
    last = torch.clamp(lengths - 1, min=0)
    time = torch.zeros(b, dtype=torch.long, device=device)
    active = time < lengths

    labels = torch.full((b,), blank, dtype=torch.long, device=device)
    pred, state = steps.predict(labels, steps.init_state(b))

    hyps = [Decoded(ids=[], frames=[]) for _ in range(b)]
    last_frame = torch.full((b,), -1, dtype=torch.long, device=device)
    run = torch.zeros(b, dtype=torch.long, device=device)  # labels emitted on last_frame

    def step(frames: torch.Tensor):
        logits = steps.joint(enc[rows, frames], pred)
        tok = logits[:, :n_tok]
        score, lab = tok.max(dim=-1)
        if dur_table is not None:
            dur = dur_table[logits[:, n_tok:].argmax(dim=-1)]
            dur = torch.where((lab == blank) & (dur == 0), torch.ones_like(dur), dur)
        else:
            dur = (lab == blank).long()
        return tok, score, lab, dur

    while bool(active.any()):
        active_prev = active.clone()
        tok, score, lab, dur = step(torch.minimum(time, last))
        is_blank = lab == blank
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
            dur = torch.where(advance, dur2, dur)
            time = torch.where(advance, time + dur2, time)
            active = time < lengths
            advance = active & is_blank
        found = active_prev & ~is_blank
        if bool(found.any()):
            _record(hyps, found, tok, lab, label_time, dur if dur_table is not None else None, confidence, alpha)
            same = found & (label_time == last_frame)
            run = torch.where(found, torch.where(same, run + 1, torch.ones_like(run)), run)
            last_frame = torch.where(found, label_time, last_frame)
            new_pred, new_state = steps.predict(torch.where(found, lab, torch.full_like(lab, blank)), state)
            state = steps.merge(found, new_state, state)
            pred = torch.where(found[:, None], new_pred, pred)
        if max_symbols is not None:
            force = active & ~is_blank & (run >= max_symbols) & (last_frame == time)
            time = time + force.long()
            active = time < lengths
    return hyps


def _record(hyps: list[Decoded], found: torch.Tensor, tok: torch.Tensor, lab: torch.Tensor,
            label_time: torch.Tensor, dur: Optional[torch.Tensor], confidence: Optional[str], alpha: float) -> None:
    """Appends the label each utterance in `found` emitted, with its frame, TDT duration,
    log-probability and confidence (from the token logits `tok`)."""
    idx = found.nonzero().flatten()
    logp = torch.log_softmax(tok[idx].float(), dim=-1)
    lp = logp.gather(1, lab[idx, None])[:, 0]
    conf = confidence_measure(logp, confidence, alpha) if confidence else None
    for j, bi in enumerate(idx.tolist()):
        h = hyps[bi]
        h.ids.append(int(lab[bi]))
        h.frames.append(int(label_time[bi]))
        if dur is not None:
            h.durations.append(int(dur[bi]))
        if conf is not None:
            h.confidences.append(float(conf[j]))
        h.logprobs.append(float(lp[j]))
        h.score += float(lp[j])


@torch.inference_mode()
def greedy_one(
    enc: torch.Tensor,
    length: int,
    steps: TransducerSteps,
    confidence: Optional[str] = "entropy",
    alpha: float = 0.33,
) -> Decoded:
    """`greedy_batch` for one utterance: enc [T, H] (projected for the joint), its first `length`
    frames. The same decisions in the same order as greedy_batch on a batch of one, made by the
    streaming search over the whole utterance; a step costs one joint call and one transfer of
    its decision instead of the batch's two dozen small tensor operations, which dominate on a
    CPU when B = 1."""
    toks, _ = transducer_chunk(enc[: int(length)], steps, initial_carry(steps, enc.device),
                               confidence=confidence, alpha=alpha)
    return _decoded(toks, steps.durations is not None)


def _decoded(toks: list[Emitted], tdt: bool) -> Decoded:
    hyp = Decoded(ids=[], frames=[])
    for t in toks:
        hyp.ids.append(t.id)
        hyp.frames.append(t.frame)
        if tdt:
            hyp.durations.append(t.duration)
        if t.confidence is not None:
            hyp.confidences.append(t.confidence)
        hyp.logprobs.append(t.logprob)
        hyp.score += t.logprob
    return hyp
