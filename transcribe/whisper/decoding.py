"""Whisper decoding over one 30 s window: logit rules, greedy and beam search, as openai-whisper defines them.

The search sees no modules: `step(tokens, positions) -> logits` takes the tokens not yet given to
the model (all of them on the first call, the last one afterwards) and returns logits [rows, k,
vocab] in float32 at the given positions of those new tokens (a step may return every position
instead; the search then picks). Only the last position, and on the first call the
start-of-transcript one (for the no-speech probability), are needed: a long prompt is not
projected onto the vocabulary. Each logit rule is a small class with `apply(logits, tokens)` that
edits the logits in place, so it can be tested on a hand-written table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

NEG_INF = float("-inf")


def _index(rule, logits: torch.Tensor) -> torch.Tensor:
    """A rule's token ids as an index tensor on the logits' device (made once per device)."""
    cache = rule.__dict__.setdefault("_index_on", {})
    t = cache.get(logits.device)
    if t is None:
        t = cache[logits.device] = torch.tensor(rule.ids, dtype=torch.long, device=logits.device)
    return t


class SuppressBlank:
    """At the first sampled position, forbid a blank (the space token) and end-of-text."""

    def __init__(self, blank_ids: Sequence[int], eot: int, sample_begin: int):
        self.ids = list(blank_ids) + [eot]
        self.sample_begin = sample_begin

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        if tokens.shape[1] == self.sample_begin:
            logits[:, _index(self, logits)] = NEG_INF


class SuppressTokens:
    def __init__(self, ids: Sequence[int]):
        self.ids = sorted(set(int(i) for i in ids))

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        if self.ids:
            logits[:, _index(self, logits)] = NEG_INF


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

    reads_rows = True  # apply() takes the tokens as host lists too (see decoding._next_logits)

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor, rows: Optional[list[list[int]]] = None) -> None:
        """rows: `tokens` as lists, when the caller holds them on the host already; otherwise
        they are read from `tokens` in one transfer."""
        tb = self.tb
        if self.no_timestamps is not None:
            logits[:, self.no_timestamps] = NEG_INF
        if rows is None:
            rows = tokens.tolist()
        for k, row in enumerate(rows):
            seq = row[self.sample_begin :]
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
        logits[:, :tb].masked_fill_(force[:, None], NEG_INF)  # no read back of `force`


def _next_logits(step, new, tokens, rules, no_speech, sot_index, seqs=None):
    """One model step: the rule-filtered next-token logits [rows, vocab] (float32) and, when
    `no_speech` is given, each row's no-speech probability read at `sot_index` before any rule.
    seqs: `tokens` as lists on the host, for the rules that read them (`reads_rows`), so that
    they need no transfer from the device."""
    n = new.shape[1]
    positions = sorted({sot_index, n - 1}) if no_speech is not None else [n - 1]
    out = step(new, positions)  # [rows, len(positions) or n, vocab]
    if out.shape[1] == n:
        out = out[:, positions]
    ns = None
    if no_speech is not None:
        ns = torch.softmax(out[:, positions.index(sot_index)].float(), dim=-1)[:, no_speech].tolist()
    logits = out[:, -1].float().clone()
    for rule in rules:
        if seqs is not None and getattr(rule, "reads_rows", False):
            rule.apply(logits, tokens, seqs)
        else:
            rule.apply(logits, tokens)
    return logits, ns


@dataclass
class WindowResult:
    tokens: list[list[int]]  # sampled tokens of each row, end-of-text excluded
    sum_logprobs: list[float]
    no_speech_probs: list[float]


@dataclass
class SearchSetup:
    """What a window's search needs besides the model's steps: the end-of-text token, the logit
    rules, at most `sample_len` sampled tokens, the no-speech token (None: no probability read) and
    the index of <|startoftranscript|> among the forced tokens (where it is read), and the decoder's
    context `n_ctx` (None: unbounded; a long prompt leaves less room)."""

    eot: int
    rules: Sequence
    sample_len: int
    no_speech: Optional[int] = None
    sot_index: int = 0
    n_ctx: Optional[int] = None


def greedy(
    step: Callable[[torch.Tensor], torch.Tensor],
    initial: torch.Tensor,
    setup: SearchSetup,
    temperature: float = 0.0,
    generator: Optional[torch.Generator] = None,
) -> WindowResult:
    """Greedy (temperature 0) or sampled (temperature > 0) decoding of every row of `initial`
    [rows, L] until end-of-text, or until the rows hold more than `setup.n_ctx` tokens. Sampling
    draws from softmax(logits / temperature); the log-probabilities summed are those of the
    unscaled, rule-filtered logits, as openai-whisper's.

    The first step's logits at `setup.sot_index` give the no-speech probability; openai-whisper
    reads it before any rule is applied, from the logits of the start-of-transcript position.
    """
    eot, n_ctx = setup.eot, setup.n_ctx
    tokens = initial
    rows = tokens.shape[0]
    device = tokens.device
    sum_logprobs = torch.zeros(rows, device=device)
    rows_index = torch.arange(rows, device=device)
    no_speech_probs = [float("nan")] * rows
    seqs = tokens.tolist()  # the rows on the host too: one transfer of the new tokens per step
    new = tokens
    for i in range(setup.sample_len):
        logits, ns = _next_logits(step, new, tokens, setup.rules, setup.no_speech if i == 0 else None,
                                  setup.sot_index, seqs)
        if ns is not None:
            no_speech_probs = ns
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator)[:, 0]
        else:
            nxt = logits.argmax(dim=-1)
        logprobs = F.log_softmax(logits, dim=-1)
        current = logprobs[rows_index, nxt]
        ended = tokens[:, -1] == eot
        sum_logprobs += torch.where(ended, torch.zeros_like(current), current)
        nxt = torch.where(ended, torch.full_like(nxt, eot), nxt)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        new = nxt[:, None]
        for seq, tok in zip(seqs, nxt.tolist()):
            seq.append(tok)
        if all(seq[-1] == eot for seq in seqs) or (n_ctx is not None and tokens.shape[1] > n_ctx):
            break
    start = initial.shape[1]
    out = []
    for seq in seqs:
        seq = seq[start:]
        out.append(seq[: seq.index(eot)] if eot in seq else seq)
    return WindowResult(out, sum_logprobs.tolist(), no_speech_probs)


def rank_by_likelihood(lengths: Sequence[int], sum_logprobs: Sequence[float], length_penalty: Optional[float] = None) -> int:
    """Index of the best candidate: the sum of log-probs divided by the length (no penalty given)
    or by the Google NMT penalty ((5 + length) / 6) ** length_penalty; the first one on a tie."""
    best, best_score = 0, None
    for k, (n, lp) in enumerate(zip(lengths, sum_logprobs)):
        div = n if length_penalty is None else ((5 + n) / 6) ** length_penalty
        score = lp / div if div else (float("nan") if lp == 0 else math.copysign(float("inf"), lp))
        if best_score is None or score > best_score:
            best, best_score = k, score
    return best


def beam_search(
    step: Callable[[torch.Tensor], torch.Tensor],
    reorder: Optional[Callable[[torch.Tensor], None]],
    initial: torch.Tensor,
    setup: SearchSetup,
    beam_size: int,
    patience: Optional[float] = None,
    length_penalty: Optional[float] = None,
) -> WindowResult:
    """Beam search over every audio row of `initial` [n_audio, L], as openai-whisper's
    BeamSearchDecoder with its MaximumLikelihoodRanker.

    The model sees n_audio * beam_size rows, the beams of one audio next to each other (row
    a * beam_size + j is beam j of audio a). `step(new [rows, n], positions) -> logits` as in
    `greedy`; after each step the surviving beams may come from other rows: `reorder(src)` gets,
    for each new row, the row it continues (a LongTensor), so the caller can reorder its cache
    (it is not called when every row continues itself). Each step, every beam proposes its
    beam_size + 1 likeliest next tokens; the beam_size likeliest proposals that do not end the text
    go on, the ending ones are kept as finished (at most round(beam_size * patience) per audio).
    The search stops once every audio has that many finished, after `setup.sample_len` steps, or
    once a row holds more than `setup.n_ctx` tokens. An audio with fewer than beam_size finished has
    its unfinished beams added, likeliest first. The result of each audio is its finished sequence
    with the best length-normalised sum of log-probs (`rank_by_likelihood`).
    """
    patience = patience or 1.0
    max_finished = round(beam_size * patience)
    if beam_size < 1 or max_finished < 1:
        raise ValueError(f"beam_size {beam_size} with patience {patience} keeps no candidate")
    n_audio, start = initial.shape
    device = initial.device
    tokens = initial.repeat_interleave(beam_size, dim=0)
    beams = _Beams(tokens.tolist(), [0.0] * tokens.shape[0], [{} for _ in range(n_audio)])
    no_speech_probs = [float("nan")] * tokens.shape[0]
    new = tokens
    for i in range(setup.sample_len):
        logits, ns = _next_logits(step, new, tokens, setup.rules, setup.no_speech if i == 0 else None,
                                  setup.sot_index, beams.prefixes)
        if ns is not None:
            no_speech_probs = ns
        logprobs = F.log_softmax(logits, dim=-1)
        top_lp, top_id = logprobs.topk(beam_size + 1, dim=-1)
        # One transfer per step: float32 log-probs and token ids (< 2**53) are exact in float64.
        top = torch.stack([top_lp.double(), top_id.double()]).tolist()
        sources = beams.advance(top[0], [[int(x) for x in row] for row in top[1]], beam_size, max_finished,
                                setup.eot)
        tokens = torch.tensor(beams.prefixes, dtype=initial.dtype, device=device)
        if reorder is not None and sources != list(range(len(sources))):
            reorder(torch.tensor(sources, dtype=torch.long, device=device))
        new = tokens[:, -1:]
        if all(len(f) >= max_finished for f in beams.finished):
            break
        if setup.n_ctx is not None and tokens.shape[1] > setup.n_ctx:
            break
    out_tokens, out_sums = beams.results(beam_size, start, setup.eot, length_penalty)
    return WindowResult(out_tokens, out_sums, no_speech_probs[::beam_size])


@dataclass
class _Beams:
    """A beam search's state on the host: every row's tokens (`prefixes`), its summed log-prob,
    and each audio's finished sequences (tokens -> summed log-prob)."""

    prefixes: list[list[int]]
    sum_logprobs: list[float]
    finished: list[dict[tuple, float]]

    def advance(self, top_lp: list, top_id: list, beam_size: int, max_finished: int, eot: int) -> list[int]:
        """One step: each row's beam_size + 1 likeliest next tokens (log-probs, ids) -> the new
        rows; returns the row each new row continues."""
        next_seqs: list[list[int]] = []
        sources: list[int] = []
        next_sums: list[float] = []
        for a in range(len(self.finished)):
            cand: dict[tuple, float] = {}
            src: dict[tuple, int] = {}
            for j in range(beam_size):
                r = a * beam_size + j
                base = np.float32(self.sum_logprobs[r])
                for lp, tok in zip(top_lp[r], top_id[r]):
                    seq = tuple(self.prefixes[r] + [tok])
                    # openai adds in float32, then takes the Python float
                    cand[seq] = float(base + np.float32(lp))
                    src[seq] = r
            ended: dict[tuple, float] = {}
            kept = 0
            for seq in sorted(cand, key=cand.get, reverse=True):
                if seq[-1] == eot:
                    ended[seq] = cand[seq]
                else:
                    next_seqs.append(list(seq))
                    sources.append(src[seq])
                    next_sums.append(cand[seq])
                    kept += 1
                    if kept == beam_size:
                        break
            for seq in sorted(ended, key=ended.get, reverse=True):
                if len(self.finished[a]) >= max_finished:
                    break
                self.finished[a][seq] = ended[seq]
        # openai stores the sums back into a float32 tensor
        self.sum_logprobs = [float(np.float32(v)) for v in next_sums]
        self.prefixes = next_seqs
        return sources

    def results(self, beam_size: int, start: int, eot: int, length_penalty: Optional[float]):
        """Each audio's best sequence (tokens after the first `start`, end-of-text excluded) and its
        summed log-prob; an audio with fewer than beam_size finished takes its unfinished beams,
        likeliest first."""
        out_tokens, out_sums = [], []
        for a, seqs in enumerate(self.finished):
            if len(seqs) < beam_size:
                group = np.array(self.sum_logprobs[a * beam_size : (a + 1) * beam_size], dtype=np.float32)
                for j in list(np.argsort(group))[::-1]:
                    seqs[tuple(self.prefixes[a * beam_size + int(j)] + [eot])] = float(group[j])
                    if len(seqs) >= beam_size:
                        break
            cands = []
            for seq in seqs:
                body = list(seq[start:])
                cands.append(body[: body.index(eot)] if eot in body else body)
            sums = list(seqs.values())
            k = rank_by_likelihood([len(c) for c in cands], sums, length_penalty)
            out_tokens.append(cands[k])
            out_sums.append(sums[k])
        return out_tokens, out_sums
