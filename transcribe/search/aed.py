"""Searches of an attention encoder-decoder (AED) recognizer, as NeMo's Transformer generators run them
(`GreedySequenceGenerator`, `BeamSearchSequenceGenerator`): the same steps, the same stop rules, the same
scores, so token ids match NeMo's.

A search drives a decoder through two callables: `step(ids [rows, L]) -> logits [rows, vocab]` (feeds the
ids at the rows' next positions, returns the last position's logits) and `select(rows)` (keeps the given
rows of the decoder's state, in that order: a beam's reordering). The prompt goes in with the first step;
each later step feeds one token a row.

NeMo's rules kept here:
- greedy takes the argmax of the raw logits; a row that has produced EOS is fed PAD from then on; the search
  stops when every row has produced EOS or after `max_new` tokens;
- the beam starts from the top-k tokens of the first distribution (log-softmax) and then, each step, takes
  the top-k continuations of every beam, adds their log-probabilities, and keeps the best k of the k*k
  candidates after dividing by the length penalty ((5 + len) / 6) ** alpha (len: 1 + the tokens of the
  prefix, prompt included, that are neither EOS nor PAD); a finished beam (its last token EOS or PAD)
  continues once with PAD at +0, its other continuations pushed down by 10001 times their log-probability
  (NeMo's `NEG_INF` = -10000 mask); the k scores kept are multiplied back by the penalty of the slot they
  land in (NeMo's order of operations); it stops when every beam is finished or after `max_new` steps;
- outputs lose their trailing EOS and PAD only (a beam whose first token is EOS is not finished: NeMo marks
  beams finished from the second token on).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

NEG_INF = -10000.0  # NeMo's mask value (nemo.collections.common.parts.NEG_INF)


@dataclass
class AEDHypothesis:
    ids: list[int]          # generated tokens, trailing EOS / PAD removed
    score: float            # greedy: sum of the tokens' log-probabilities (EOS included); beam: the beam's score
    logprobs: list[float]   # greedy: each kept token's log-probability; beam: empty


def strip_end(ids: list[int], eos: int, pad: int) -> list[int]:
    end = len(ids)
    while end > 0 and ids[end - 1] in (eos, pad):
        end -= 1
    return ids[:end]


@torch.no_grad()
def greedy(step: Callable, prompt: torch.Tensor, max_new: int, eos: int, pad: int) -> list[AEDHypothesis]:
    """NeMo's greedy search for each row of `prompt` [rows, P]."""
    rows = prompt.shape[0]
    finished = torch.zeros(rows, dtype=torch.bool)
    out: list[list[int]] = [[] for _ in range(rows)]
    lps: list[list[float]] = [[] for _ in range(rows)]
    ids = prompt
    for _ in range(max_new):
        logits = step(ids).float()
        nxt = logits.argmax(dim=-1).cpu()
        logp = torch.log_softmax(logits, dim=-1).cpu()
        nxt = torch.where(finished, torch.full_like(nxt, pad), nxt)
        for r in range(rows):
            if not finished[r]:
                out[r].append(int(nxt[r]))
                lps[r].append(float(logp[r, nxt[r]]))
        finished |= nxt == eos
        if bool(finished.all()):
            break
        ids = nxt.view(rows, 1).to(prompt.device)
    hyps = []
    for r in range(rows):
        kept = strip_end(out[r], eos, pad)
        hyps.append(AEDHypothesis(kept, float(sum(lps[r])), lps[r][:len(kept)]))
    return hyps


@torch.no_grad()
def greedy_from_draft(step: Callable, cut: Callable, prompt: torch.Tensor, draft: list[int], max_new: int, eos: int,
                      pad: int) -> AEDHypothesis:
    """`greedy` for one row (prompt [1, P]) given a draft of its ids (a live session's previous partial of the same
    audio, which the new one mostly repeats): the prompt and the draft go in one call, `step(ids, every=True)` ->
    the logits of every fed position [1, L, vocab]; the draft's longest prefix that greedy would emit (each draft
    id the argmax after the ids before it) is kept, `cut(n)` cuts the decoder's state back to its first n fed
    positions (the prompt and the kept ids), and greedy goes on from greedy's own next id. The same ids as
    `greedy` but one call for the ids the draft got right instead of one each: the verifying call computes the
    kept positions together, so their logits may differ from the one-at-a-time ones in the last bits (a flip only
    at an exact near-tie)."""
    p = prompt.shape[1]
    draft = [int(i) for i in draft[:max_new]]
    if eos in draft:
        draft = draft[:draft.index(eos)]
    fed = torch.cat([prompt, torch.tensor([draft], dtype=prompt.dtype, device=prompt.device)], dim=1)
    logits = step(fed, every=True)[0, p - 1:].float()                 # [len(draft) + 1, vocab]
    pred = logits.argmax(dim=-1).cpu()
    logp = torch.log_softmax(logits, dim=-1).cpu()
    k = 0
    while k < len(draft) and int(pred[k]) == draft[k]:
        k += 1
    out = draft[:k]
    lps = [float(logp[j, draft[j]]) for j in range(k)]
    score = sum(lps)
    if k < max_new:
        nxt = int(pred[k])
        out.append(nxt)
        lps.append(float(logp[k, nxt]))
        score += lps[-1]
        cut(p + k)
        if nxt != eos and k + 1 < max_new:
            rest = greedy(step, torch.tensor([[nxt]], dtype=prompt.dtype, device=prompt.device), max_new - k - 1,
                          eos, pad)[0]
            out += rest.ids
            lps += rest.logprobs
            score += rest.score
    else:
        cut(p + k - 1)  # the bound reached inside the draft: its last kept id is not fed, as in greedy
    kept = strip_end(out, eos, pad)
    return AEDHypothesis(kept, float(score), lps[:len(kept)])


@torch.no_grad()
def beam(step: Callable, select: Callable, prompt: torch.Tensor, beam_size: int, max_new: int, eos: int, pad: int,
         length_penalty: float = 0.0) -> list[list[AEDHypothesis]]:
    """NeMo's beam search for each row of `prompt` [B, P]: per row, its `beam_size` hypotheses, best
    first (by score over the length penalty; NeMo's order among equals)."""
    b, p = prompt.shape
    k = beam_size
    logp = torch.log_softmax(step(prompt).float(), dim=-1).cpu()
    scores, first = logp.topk(k, dim=-1)                           # [B, k]
    scores = scores.reshape(-1, 1)                                 # rows b*k + j
    prefixes = torch.cat([prompt.cpu().repeat_interleave(k, dim=0), first.reshape(-1, 1)], dim=1)
    select(torch.arange(b).repeat_interleave(k).to(prompt.device))  # each item's state, once per beam
    finished = torch.zeros(b * k, 1, dtype=torch.long)
    lengths = torch.full((b * k, 1), float(prefixes.shape[1] + 1))

    def penalty(lens: torch.Tensor) -> torch.Tensor:
        return ((5.0 + lens) / 6.0).pow(length_penalty)

    for _ in range(max_new):
        pad_mask = finished.repeat(1, k)
        logp = torch.log_softmax(step(prefixes[:, -1:].to(prompt.device)).float(), dim=-1).cpu()
        scores_i, tokens_i = logp.topk(k, dim=-1)
        tokens_i = pad * pad_mask + tokens_i * (1 - pad_mask)
        pad_mask = pad_mask.float()
        pad_mask[:, 1:] = pad_mask[:, 1:] * NEG_INF
        scores = scores + scores_i * (1 - pad_mask)
        pen = penalty(lengths)
        scores = scores / pen
        scores, index = scores.view(b, k * k).topk(k, dim=1)
        scores = scores.reshape(-1, 1) * pen
        source = (index // k) + torch.arange(b).view(b, 1) * k      # the beam each winner extends
        prefixes = torch.cat([prefixes[source.reshape(-1)], tokens_i.view(b, k * k).gather(1, index).reshape(-1, 1)],
                             dim=1)
        select(source.reshape(-1).to(prompt.device))
        live = prefixes.ne(eos) & prefixes.ne(pad)
        lengths = 1.0 + live.sum(dim=1, keepdim=True).float()
        finished = (~live[:, -1:]).long()
        if int(finished.sum()) == b * k:
            break
    normalized = (scores / penalty(lengths)).view(b, k)
    out = []
    for i in range(b):
        order = sorted(range(k), key=lambda j: -float(normalized[i, j]))  # stable: NeMo's argmax takes the first
        out.append([AEDHypothesis(strip_end(prefixes[i * k + j, p:].tolist(), eos, pad), float(scores[i * k + j]), [])
                    for j in order])
    return out
