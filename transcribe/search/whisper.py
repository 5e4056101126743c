"""Whisper decoding over one 30 s window: logit rules and greedy search, as openai-whisper defines them.

The search sees no modules: `step(tokens) -> logits` takes the tokens not yet given to the model
(all of them on the first call, the last one afterwards) and returns the next-token logits
[rows, vocab] in float32. Each logit rule is a small class with `apply(logits, tokens)` that
edits the logits in place, so it can be tested on a hand-written table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F

NEG_INF = float("-inf")


class SuppressBlank:
    """At the first sampled position, forbid a blank (the space token) and end-of-text."""

    def __init__(self, blank_ids: Sequence[int], eot: int, sample_begin: int):
        self.ids = list(blank_ids) + [eot]
        self.sample_begin = sample_begin

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        if tokens.shape[1] == self.sample_begin:
            logits[:, self.ids] = NEG_INF


class SuppressTokens:
    def __init__(self, ids: Sequence[int]):
        self.ids = sorted(set(int(i) for i in ids))

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        if self.ids:
            logits[:, self.ids] = NEG_INF


class ApplyTimestampRules:
    """Timestamps come in pairs, never decrease, and a segment has a nonzero length; the first
    token is a timestamp no later than `max_initial_timestamp_index`; when the timestamps together
    are likelier than the best text token (judged on the logits as masked so far), a timestamp
    must follow."""

    def __init__(self, timestamp_begin: int, eot: int, no_timestamps: Optional[int], sample_begin: int,
                 max_initial_timestamp_index: Optional[int] = 50):
        self.tb = timestamp_begin
        self.eot = eot
        self.no_timestamps = no_timestamps
        self.sample_begin = sample_begin
        self.max_initial = max_initial_timestamp_index

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        tb = self.tb
        if self.no_timestamps is not None:
            logits[:, self.no_timestamps] = NEG_INF
        for k in range(tokens.shape[0]):
            seq = tokens[k, self.sample_begin :].tolist()
            last_ts = len(seq) >= 1 and seq[-1] >= tb
            penult_ts = len(seq) < 2 or seq[-2] >= tb
            if last_ts:
                if penult_ts:
                    logits[k, tb:] = NEG_INF  # a pair just closed: text (or end) comes next
                else:
                    logits[k, : self.eot] = NEG_INF  # a lone timestamp: its partner or the end
            stamps = [t for t in seq if t >= tb]
            if stamps:
                # No going back in time; a segment that just opened must not close at once.
                last = stamps[-1] if (last_ts and not penult_ts) else stamps[-1] + 1
                logits[k, tb:last] = NEG_INF
        if tokens.shape[1] == self.sample_begin:
            logits[:, :tb] = NEG_INF
            if self.max_initial is not None:
                logits[:, tb + self.max_initial + 1 :] = NEG_INF
        logprobs = F.log_softmax(logits.float(), dim=-1)
        ts_mass = logprobs[:, tb:].logsumexp(dim=-1)
        best_text = logprobs[:, :tb].max(dim=-1).values
        force = ts_mass > best_text
        if bool(force.any()):
            logits[force, :tb] = NEG_INF


@dataclass
class WindowResult:
    tokens: list[list[int]]  # sampled tokens of each row, end-of-text excluded
    sum_logprobs: list[float]
    no_speech_probs: list[float]


def greedy(
    step: Callable[[torch.Tensor], torch.Tensor],
    initial: torch.Tensor,
    eot: int,
    rules: Sequence,
    sample_len: int,
    no_speech: Optional[int] = None,
    sot_index: int = 0,
    first_logits_hook: Optional[Callable[[torch.Tensor], None]] = None,
) -> WindowResult:
    """Greedy (temperature 0) decoding of every row of `initial` [rows, L] until end-of-text.

    The first step's logits at `sot_index` give the no-speech probability; openai-whisper reads it
    before any rule is applied, from the logits of the start-of-transcript position.
    """
    tokens = initial
    rows = tokens.shape[0]
    sum_logprobs = torch.zeros(rows)
    no_speech_probs = [float("nan")] * rows
    new = tokens
    for i in range(sample_len):
        all_logits = step(new)  # [rows, n_new, vocab]
        if i == 0 and no_speech is not None:
            p = torch.softmax(all_logits[:, sot_index].float(), dim=-1)[:, no_speech]
            no_speech_probs = p.tolist()
        logits = all_logits[:, -1].float().clone()
        for rule in rules:
            rule.apply(logits, tokens)
        nxt = logits.argmax(dim=-1)
        logprobs = F.log_softmax(logits, dim=-1)
        current = logprobs[torch.arange(rows), nxt]
        ended = tokens[:, -1] == eot
        sum_logprobs += torch.where(ended, torch.zeros_like(current), current)
        nxt = torch.where(ended, torch.full_like(nxt, eot), nxt)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        new = nxt[:, None]
        if bool((tokens[:, -1] == eot).all()):
            break
    start = initial.shape[1]
    out = []
    for r in range(rows):
        seq = tokens[r, start:].tolist()
        out.append(seq[: seq.index(eot)] if eot in seq else seq)
    return WindowResult(out, sum_logprobs.tolist(), no_speech_probs)
